"""Rules as data: `schema` (the rule-file format, one source for validation and the published
JSON Schema), `load` (files in, validated rules out), `precedence` (which rule wins a node),
`docs` (generated pages) and `testing` (every example is a test). `base` holds the pieces match
kinds share; the match kinds themselves live in `npu_migrate.engine.kinds`."""
