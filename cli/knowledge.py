"""`frontdesk knowledge ...`: the business's documents the replies are grounded in (one
profile's library: `--profile NAME`, the app's default profile without)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from frontdesk.cli._options import DbOption, app_option, db_url, emit_json, json_option
from frontdesk.devkit.app import DEFAULT_APP, load_app
from frontdesk.errors import UserError
from frontdesk.knowledge import Passage
from frontdesk.orchestrator import Orchestrator

app = typer.Typer(help="knowledge commands", no_args_is_help=True)

AppOption = Annotated[
    str, app_option("module:attr naming an Orchestrator (its store and embeddings).")
]
ProfileOption = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="The profile whose documents these are (its library: Profile.knowledge_source);"
        " default: the app's default profile.",
    ),
]


def _open(app_spec: str, db: str | None) -> Orchestrator:
    return load_app(app_spec, model="offline", db=db_url(db))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"no file {path}; give the path of a Markdown or text file") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text; convert it first") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None


async def _add(
    app_spec: str, db: str | None, files: list[tuple[str, str]], profile: str | None
) -> list[int]:
    orch = _open(app_spec, db)
    try:
        return [await orch.knowledge.add(s, text, profile=profile) for s, text in files]
    finally:
        await orch.aclose()


PATTERN_FIELDS = ("{path}", "{name}", "{stem}")


def source_names(paths: list[Path], root: Path | None, source: str | None) -> list[str]:
    """The source name of each file: its path relative to `root` (default: the folder the
    files have in common), so no machine path becomes the citation customers see; or
    `source`, a name for one file or a pattern for each (`help/{name}`: `{path}` the
    relative path, `{name}` the file name, `{stem}` without its suffix).

    Raises:
        UserError: a file outside `root`, a plain `--source` with several files, two files
            given the same name.
    """
    resolved = [path.resolve() for path in paths]
    base = (
        root.resolve()
        if root is not None
        else Path(os.path.commonpath([p.parent for p in resolved]))
    )
    relative = []
    for path, full in zip(paths, resolved, strict=True):
        try:
            relative.append(full.relative_to(base).as_posix())
        except ValueError:
            raise UserError(f"{path} is not under --root {root}; give another --root") from None
    if source is None:
        names = relative
    elif not any(field in source for field in PATTERN_FIELDS):
        if len(paths) != 1:
            raise UserError(
                "--source names one source: give exactly one PATH with it, or a pattern for"
                " each file ({path}, {name} or {stem}, e.g. --source 'help/{name}')"
            )
        names = [source]
    else:
        names = [
            source.replace("{path}", rel).replace("{name}", full.name).replace("{stem}", full.stem)
            for rel, full in zip(relative, resolved, strict=True)
        ]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"two files would be the source {twice[0]!r}: name them apart")
    return names


@app.command("add")
def add(
    paths: Annotated[list[Path], typer.Argument(help="Markdown or text files to add.")],
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            help="The source's name (one PATH), or a pattern for each file: {path}, {name},"
            " {stem} (e.g. 'help/{name}').",
        ),
    ] = None,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            help="Name each source by its path relative to this folder (default: the"
            " folder the files have in common).",
        ),
    ] = None,
    db: DbOption = None,
    app_spec: AppOption = DEFAULT_APP,
    profile: ProfileOption = None,
) -> None:
    """Add files as sources (a file added again replaces its passages: unchanged ones keep
    their id and version, changed ones get the next version). A source's name is what a
    reply cites: the file's path relative to --root (or to the files' common folder),
    never the machine's absolute path."""
    names = source_names(paths, root, source)
    files = [(name, _read(path)) for name, path in zip(names, paths, strict=True)]
    counts = asyncio.run(_add(app_spec, db, files, profile))
    console = Console(soft_wrap=True)
    for (name, _text), count in zip(files, counts, strict=True):
        console.print(f"{escape(name)}: {count} passage{'s' if count != 1 else ''}")


async def _passages(app_spec: str, db: str | None, profile: str | None) -> list[Passage]:
    orch = _open(app_spec, db)
    try:
        return await orch.knowledge.passages(profile=profile)
    finally:
        await orch.aclose()


@app.command("list")
def list_sources(
    db: DbOption = None,
    app_spec: AppOption = DEFAULT_APP,
    json_out: Annotated[bool, json_option("A JSON list of {source, passages} on stdout.")] = False,
    profile: ProfileOption = None,
) -> None:
    """The sources stored, with how many passages each holds."""
    counts = Counter(p.source for p in asyncio.run(_passages(app_spec, db, profile)))
    if json_out:
        emit_json([{"source": s, "passages": n} for s, n in sorted(counts.items())])
        return
    console = Console(soft_wrap=True)
    if not counts:
        console.print("no knowledge stored; add some with: frontdesk knowledge add PATH")
        return
    table = Table("source", "passages")
    for name, count in sorted(counts.items()):
        table.add_row(escape(name), str(count))
    console.print(table)


async def _search(
    app_spec: str, db: str | None, query: str, limit: int, profile: str | None
) -> list[Passage]:
    orch = _open(app_spec, db)
    try:
        return await orch.knowledge.search(query, limit=limit, profile=profile)
    finally:
        await orch.aclose()


@app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="The question, as a customer would ask it.")],
    limit: Annotated[int, typer.Option("--limit", help="Passages at most (1 to 100).")] = 5,
    db: DbOption = None,
    app_spec: AppOption = DEFAULT_APP,
    json_out: Annotated[bool, json_option("A JSON list of passages on stdout.")] = False,
    profile: ProfileOption = None,
) -> None:
    """The passages a turn of the profile would find for QUERY, best first."""
    found = asyncio.run(_search(app_spec, db, query, limit, profile))
    if json_out:
        emit_json([dataclasses.asdict(p) for p in found])
        return
    console = Console(soft_wrap=True)
    if not found:
        console.print("no passage matches")
        return
    for rank, p in enumerate(found, 1):
        console.print(
            f"[bold]{rank}. {escape(p.source)} - {escape(p.title)}[/bold]"
            f"  [dim]v{p.version} · id {p.id} · score {p.score:.4f}[/dim]"
        )
        console.print(escape(p.text), highlight=False)
        console.print()


async def _remove(app_spec: str, db: str | None, source: str, profile: str | None) -> int:
    orch = _open(app_spec, db)
    try:
        return await orch.knowledge.remove(source, profile=profile)
    finally:
        await orch.aclose()


@app.command("remove")
def remove(
    source: Annotated[str, typer.Argument(help="The source's name (`frontdesk knowledge list`).")],
    db: DbOption = None,
    app_spec: AppOption = DEFAULT_APP,
    profile: ProfileOption = None,
) -> None:
    """Delete a source and its passages."""
    count = asyncio.run(_remove(app_spec, db, source, profile))
    if count == 0:
        raise UserError(f"no source {source!r}; list them with: frontdesk knowledge list")
    Console(soft_wrap=True).print(
        f"removed {escape(source)}: {count} passage{'s' if count != 1 else ''}"
    )
