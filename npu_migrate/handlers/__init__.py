"""The handlers of the files that are not Python source, one module per kind of file (a
notebook, a shell script, a Dockerfile or Makefile, a dependency file, a YAML/JSON config, a
custom CUDA operator's C++/CUDA source), with the interface of the Python one
(`engine.source.migrate_source`): `(bytes, rule index, enabled fixes, module) -> FileResult`.
`pipeline.HANDLERS` picks one by the file's kind; `operator_links` joins the native operators
to their builds and callers across a run."""
