"""`frontdesk erase`, `frontdesk audit retention`, `frontdesk audit rotate-key` and
`frontdesk privacy audit-surfaces`.

Each reads the master key from `FRONTDESK_MASTER_KEY` (docs/privacy.md). Exit codes:
0 done (or nothing to do), 1 declined at the confirmation prompt, 2 an error (`error: ...`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import os
from typing import Annotated

import httpx
import typer

from frontdesk.audit import crypto
from frontdesk.audit.compact import inflate_bytes
from frontdesk.audit.export import render_html, write_jsonl
from frontdesk.audit.refs import rewrap_ref_key
from frontdesk.audit.store import AuditLog
from frontdesk.cli._options import DbOption, JsonOption, emit_json, existing_db
from frontdesk.cli.audit import conversation_transcripts, kept_values
from frontdesk.db import Connection, create_engine, dispose_engine, run_write
from frontdesk.errors import AuditKeyError, UserError
from frontdesk.orchestrator.erasure import apply_retention, parse_age, request_erasure
from frontdesk.redaction import Redactor
from frontdesk.schema import ensure_schema
from frontdesk.surfaces import Occurrence, count_in, occurrences_at_rest
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


# -- audit-surfaces -------------------------------------------------------------------------

app = typer.Typer(no_args_is_help=True)

TOKEN_ENV = "FRONTDESK_TOKEN"
"""An operator's bearer token for `audit-surfaces --service` (instead of `--token`)."""

ROUTES = ("context", "transcript", "thread", "events")
"""The routes of a conversation `audit-surfaces --service` reads (with `/v1/handoffs`)."""


async def route_occurrences(
    client: httpx.AsyncClient, conversations: list[str], needle: str, *, wait: float = 2.0
) -> list[Occurrence]:
    """Clear occurrences of `needle` in what a running service's operator routes answer for
    `conversations` (the client carries the service's base URL and an operator's token).
    An event stream is read until it ends or `wait` seconds pass."""
    found = []
    paths = ["/v1/handoffs"] + [f"/v1/conversations/{c}/{r}" for c in conversations for r in ROUTES]
    for path in paths:
        body = ""
        if path.endswith("/events"):
            with contextlib.suppress(httpx.TimeoutException, TimeoutError):
                async with asyncio.timeout(wait), client.stream("GET", path) as response:
                    async for chunk in response.aiter_text():
                        body += chunk
        else:
            response = await client.get(path)
            if response.status_code >= 400:
                raise UserError(f"GET {path}: {response.status_code} {response.text[:200]}")
            body = response.text
        found.append(Occurrence(f"GET {path}", count_in(body, needle)))
    return found


async def export_occurrences(
    log: AuditLog, conversations: list[str], needle: str, redactor: Redactor
) -> list[Occurrence]:
    """Clear occurrences of `needle` in each conversation's `audit export` (JSONL and HTML)
    with `redactor` (the default redaction: what a reviewer gets without `--reveal`)."""
    found = []
    for cid in conversations:
        out = io.StringIO()
        ruled = await kept_values(log, cid, redactor)
        write_jsonl(await log.events(cid), out, redactor=redactor, ruled=ruled)
        found.append(Occurrence(f"audit export {cid} (jsonl)", count_in(out.getvalue(), needle)))
        transcripts = await conversation_transcripts(log, [cid], redactor)
        page = render_html(transcripts, title=cid, redacted=True)
        found.append(Occurrence(f"audit export {cid} (html)", count_in(page, needle)))
    return found


@app.command("audit-surfaces")
def audit_surfaces(
    value: Annotated[str, typer.Argument(help="The text to look for (a PIN, a card number).")],
    db: DbOption = None,
    service: Annotated[
        str | None,
        typer.Option("--service", help="A running service's base URL: read its operator routes."),
    ] = None,
    conversations: Annotated[
        list[str] | None,
        typer.Option(
            "--conversation",
            "-c",
            help="A conversation whose routes (--service) and export are read (repeatable;"
            " default for the exports: every conversation of the audit log).",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", help=f"An operator's bearer token (default: ${TOKEN_ENV})."),
    ] = None,
    exports: Annotated[
        bool, typer.Option("--exports/--no-exports", help="Also count it in `audit export`.")
    ] = True,
    wait: Annotated[float, typer.Option("--wait", help="Seconds to read each event stream.")] = 2.0,
    as_json: JsonOption = False,
) -> None:
    """Print every place VALUE occurs in clear: each table and column of the database (full-text
    tables included), each conversation's default-redacted export, and (with --service) a
    running service's operator routes. Encrypted audit payloads hold it only as ciphertext,
    so they do not count (docs/privacy.md, "What is stored where")."""
    if not value:
        raise UserError("give a non-empty VALUE to look for")
    url = existing_db(db)
    bearer = token or os.environ.get(TOKEN_ENV)
    if service is not None and not bearer:
        raise UserError(f"--service needs an operator's token: --token or ${TOKEN_ENV}")

    async def main() -> list[Occurrence]:
        engine = create_engine(url)
        try:
            found = await occurrences_at_rest(engine, value, decode=inflate_bytes)
            if exports:
                log = await AuditLog.open(engine)
                try:
                    ids = list(conversations or []) or await log.conversations()
                    found += await export_occurrences(log, ids, value, Redactor())
                finally:
                    await log.aclose()
        finally:
            await dispose_engine(engine)
        if service is not None:
            headers = {"Authorization": f"Bearer {bearer}"}
            async with httpx.AsyncClient(base_url=service, headers=headers, timeout=30) as client:
                found += await route_occurrences(
                    client, list(conversations or []), value, wait=wait
                )
        return found

    found = asyncio.run(main())
    if as_json:
        emit_json({"value_length": len(value), "places": [dataclasses.asdict(o) for o in found]})
        return
    clear = [o for o in found if o.count]
    for o in found:
        typer.echo(f"{o.count:6d}  {o.place}" if o.count else f"     -  {o.place}")
    typer.echo(
        f"in clear in {len(clear)} place(s), {sum(o.count for o in clear)} occurrence(s)"
        if clear
        else "not found in clear anywhere looked"
    )
