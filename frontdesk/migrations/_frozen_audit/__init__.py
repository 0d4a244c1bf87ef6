"""The audit code the migrations `0014_audit_blobs` and `0017_audit_compact` convert the
stored log with, frozen: copied from `audit/` (`compact`, `chain`, `blobs`, `crypto`,
`repack`) as those revisions were written, and trimmed to what the conversions run.

A migration is history: changing the audit code must not change what an old revision does
to a database that reaches it later. So nothing here imports `frontdesk.audit` (or any
other room; `tests/test_architecture.py` checks it), and nothing here is edited to follow
the audit code: the stored forms it reads and writes are those of revisions 0012 to 0019.
"""
