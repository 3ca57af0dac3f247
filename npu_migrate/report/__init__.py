"""Everything a run tells the user: the summary, output formats, the change list, diffs."""
