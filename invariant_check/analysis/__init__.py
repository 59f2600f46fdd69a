"""The shared analysis layer: one model of the linted project that every rule queries.

- `source`: a file's bytes, decoded and normalised once, with positions.
- `outline`: where a module's top-level definitions and class methods start, found from the
  text without parsing, so that only the definitions a rule can fire in are parsed.
- `needs`: what a rule needs to find in a definition's text before it can report there; the
  prefilter is derived from it.
- `facts`: what one definition tells the rest of the project (imports, classes, calls), built
  from the stdlib `ast` and cached per file content.
- `project`: the project root, module resolution through imports, lazily loaded facts.
- `summaries`: transitive facts of functions across modules (compacts, runs a forward, ...).
- `flow`: control facts inside one function (call order on every path, conditions, loops).
- `values`: value facts inside one function (what a loop binds, what a check validates).
- `consumption`: whether the entries a one-entry check did not see are used after it.
- `singletons`: collections known to hold one entry (spelled, guaranteed, or kept so by
  every write of a `self` attribute).
"""
