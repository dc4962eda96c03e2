"""Policy-program templates of the built-in agent: real Python modules, rendered with parameters.

Each module here is a template a linter, a test and a reader see as code. A template
reads its constants from a module-level table `P` (the line ending in `# params`) and
imports helpers from sibling templates on lines ending in `# inline`. `render`
(`ole.agents.builtin.mechanism`) turns a template into one self-contained
`policy.py`: the inlined helpers first (each once, dependencies first), then the
template, with `P` bound to a `PARAMS` table of the parameter values (or, for whole-file
edits, every `P["name"]` replaced by its value). Only the stdlib, numpy and scipy may be
imported at run time, which is why helpers are inlined rather than imported.
"""
