"""Migration scripts; revision ids are fixed (docs/CONTRACTS.md): 0001_threads, 0002_audit, ..."""
