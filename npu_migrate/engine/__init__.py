"""One file through the engine: parse, resolve imports, match every rule in one pass (the match
kinds in `kinds/`), fix, and edit imports. `source.migrate_source` is the entry point."""
