"""`frontdesk erase`, `frontdesk audit retention` and `frontdesk audit rotate-key`.

Each reads the master key from `FRONTDESK_MASTER_KEY` (docs/privacy.md). Exit codes:
0 done (or nothing to do), 1 declined at the confirmation prompt, 2 an error (`error: ...`).
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

import typer

from frontdesk.audit import crypto
from frontdesk.audit.refs import rewrap_ref_key
from frontdesk.audit.store import AuditLog
from frontdesk.cli._options import DbOption, JsonOption, emit_json, existing_db
from frontdesk.db import Connection, create_engine, dispose_engine, run_write
from frontdesk.errors import AuditKeyError, UserError
from frontdesk.orchestrator.erasure import apply_retention, parse_age, request_erasure
from frontdesk.schema import ensure_schema
from frontdesk.threads.store import ConversationStore

NEW_KEY_ENV = "FRONTDESK_NEW_MASTER_KEY"


def erase(
    user: Annotated[str, typer.Option("--user", help="The user id to erase.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask to confirm.")] = False,
    requested_by: Annotated[
        str | None, typer.Option("--requested-by", help="Who asked (recorded; no names).")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Erase a user: transcripts, summaries, outcomes, audit data keys (docs/privacy.md).
    The request is recorded first: if this command dies, a job runner finishes it."""
    url = existing_db(db)
    if not yes and not typer.confirm(
        f"Erase every stored message and audit payload of user {user!r}? This cannot be undone"
    ):
        typer.echo("nothing erased", err=True)
        raise typer.Exit(1)

    async def main() -> dict[str, int]:
        store = await ConversationStore.open(url)
        try:
            log = await AuditLog.open(store.engine)
            # Recorded first, with its job: if this command dies, a job runner finishes it.
            report = await request_erasure(store.engine, log, user, requested_by=requested_by)
            return report.counts()
        finally:
            await store.aclose()

    counts = asyncio.run(main())
    if as_json:
        emit_json(counts)
        return
    typer.echo("erased: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if counts["audit_rows_in_clear"]:
        typer.echo(
            f"warning: {counts['audit_rows_in_clear']} audit rows of this user were written"
            " without a master key and stay readable (docs/privacy.md)",
            err=True,
        )


def retention(
    older_than: Annotated[
        str,
        typer.Option("--older-than", help="Age past which payloads are shredded: 90d, 12w, 6m."),
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count, change nothing.")] = False,
    transcripts: Annotated[
        bool, typer.Option("--transcripts", help="Also erase transcript messages past the age.")
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Shred audit payloads (and with --transcripts, messages) older than an age."""
    try:
        age = parse_age(older_than)
    except ValueError as e:
        raise UserError(str(e)) from None
    url = existing_db(db)

    async def main() -> dict[str, object]:
        store = await ConversationStore.open(url) if transcripts else None
        log = await AuditLog.open(url if store is None else store.engine)
        try:
            engine = None if store is None else store.engine
            report = await apply_retention(
                engine, log, age, dry_run=dry_run, transcripts=transcripts
            )
        finally:
            await log.aclose()
            if store is not None:
                await store.aclose()
        return {"cutoff": report.cutoff.isoformat(), "periods_before": report.periods_before,
                "dry_run": dry_run, **report.counts()}  # fmt: skip

    out = asyncio.run(main())
    if as_json:
        emit_json(out)
        return
    verb = "would shred" if dry_run else "shredded"
    counts = ", ".join(f"{k} {out[k]}" for k in ("audit_keys", "messages", "summaries", "outcomes"))
    typer.echo(f"{verb} (before {out['periods_before']}, cutoff {out['cutoff']}): {counts}")


def _rewrap_all(conn: Connection, old: crypto.KeyProvider, new: crypto.KeyProvider) -> int:
    """The data keys and the ref key (the refs stay the same), in one transaction; how many
    data keys were re-wrapped."""
    done = crypto.rewrap(conn, old, new)
    rewrap_ref_key(conn, old, new)
    return done


def rotate_key(db: DbOption = None) -> None:
    """Re-wrap every data key from FRONTDESK_MASTER_KEY to FRONTDESK_NEW_MASTER_KEY."""
    old = crypto.master_key_from_env()
    text = os.environ.get(NEW_KEY_ENV, "")
    if old is None or not text.strip():
        raise AuditKeyError(
            f"set {crypto.MASTER_KEY_ENV} to the current master key and {NEW_KEY_ENV} to the"
            " new one (32 random bytes, base64); then make the new key FRONTDESK_MASTER_KEY"
        )
    new = crypto.MasterKey.from_text(text, source=NEW_KEY_ENV)
    url = existing_db(db)

    async def main() -> int:
        engine = create_engine(url)
        try:
            await ensure_schema(engine)
            return await run_write(engine, lambda conn: _rewrap_all(conn, old, new))
        finally:
            await dispose_engine(engine)

    done = asyncio.run(main())
    typer.echo(
        f"re-wrapped {done} data keys from {old.key_id} to {new.key_id}; the chain is unchanged."
        f" Set {crypto.MASTER_KEY_ENV} to the new key now."
    )
