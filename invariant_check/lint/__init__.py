"""The stages of one lint run: discovery (files), projects (configuration per root), engine
(batches, cache, prefilter), analyze (one file's rules), finalize (suppressions, per-file ignores,
unused-suppression findings), cache and records.
"""
