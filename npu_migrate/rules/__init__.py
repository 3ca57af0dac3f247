"""Rules as data: `schema` (the rule-file format, one source for validation and the published
JSON Schema, assembled from the match kinds' own schemas), `load` (files in, validated rules
out), `precedence` (the overlaps a rule set must declare), `docs` (generated pages) and `testing`
(every example is a test). This package sits above the engine: it imports the match kinds
(`npu_migrate.engine.kinds`, whose building blocks are `engine.kinds.fields`), and nothing in the
engine imports it at run time."""
