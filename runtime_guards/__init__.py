"""Runtime guards for vLLM speculative decoding; see docs/guards.md."""
