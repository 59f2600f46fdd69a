"""invariant-check: static and runtime checks for speculative-decoding invariants.

Importing this package must stay cheap: the linter never imports torch, triton or vllm.
"""

__version__ = "0.1.0"
