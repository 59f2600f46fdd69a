"""`invariant-check server`: the Language Server Protocol over standard input/output (pygls).

What it offers, for Python documents:

- diagnostics on open, on change (debounced: `debounce-ms`) and on save, for the buffer's text:
  the rule's code (linked to its page), its name and message; the fix hint as related
  information; syntax errors as errors;
- code actions: each finding's fix (`quickfix`; safe ones preferred, unsafe ones titled
  "(unsafe)"), a `# noqa: IC00x` suppression of the finding's line, and "fix all safe"
  (`source.fixAll.invariant-check`, the same verified passes as `lint --fix`);
- hover on a flagged line: the rule's summary and why it matters;
- settings from `initializationOptions` and the `invariant-check` section of the client's
  configuration (`workspace/configuration`); a settings change, a workspace folder change or a
  saved `pyproject.toml` sets the projects up again and re-lints every open document.

Nothing a rule or the server does wrong stops the session: it becomes a `window/logMessage`.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import PositionCodec
from pygls.workspace.position_codec import ServerTextPosition

from .. import __version__
from ..settings.config import ConfigError
from ..api.types import SAFE, Finding
from .session import BufferResult, Session, Settings, SettingsError

# Where the rule pages are published: docs/rules/<CODE>-<name>.md of the repository.
RULE_DOCS_URL = "https://github.com/invariant-check/invariant-check/blob/main/docs/rules/{code}-{name}.md"
SOURCE = "invariant-check"
SECTION = "invariant-check"
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.invariant-check"
_NEWLINE = re.compile(r"\r\n|\r|\n")


def rule_url(code: str, name: str) -> str:
    return RULE_DOCS_URL.format(code=code, name=name)


@dataclass
class _Linted:
    """The last lint of a document: for code actions and hover on that same text."""

    version: int | None
    text: str
    findings: list[Finding] = field(default_factory=list)


class InvariantCheckServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("invariant-check", __version__)
        self.session = Session()
        # one thread lints, in order: the project model is not shared between threads
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="invariant-check-lint")
        self.pending: dict[str, asyncio.Task] = {}
        self.linted: dict[str, _Linted] = {}
        self.client_settings: Any = None
        self.init_settings: Any = None
        self.logged: set[str] = set()

    # -- logging -----------------------------------------------------------------------------------
    def log(self, message: str, kind: types.MessageType = types.MessageType.Error) -> None:
        try:
            self.window_log_message(types.LogMessageParams(type=kind, message=f"invariant-check: {message}"))
        except Exception:  # the transport is gone: nothing to tell
            pass

    def log_exception(self, what: str, exc: BaseException) -> None:
        detail = " ".join(str(exc).split())
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" (at {Path(where.filename).name}:{where.lineno})" if where else ""
        self.log(f"{what}: internal error: {type(exc).__name__}{': ' + detail if detail else ''}{at}")

    # -- settings ------------------------------------------------------------------------------------
    def apply_settings(self, raw: Any) -> str | None:
        """Sets the session up with the client's settings; the error to show, if any (this runs
        in the lint thread: only the event loop's thread talks to the client)."""
        merged: dict = {}
        for part in (self.init_settings, raw):
            if isinstance(part, dict):
                inner = part.get(SECTION, part)
                merged.update(inner if isinstance(inner, dict) else part)
        error = None
        try:
            settings = Settings.from_client(merged)
        except SettingsError as exc:
            error = str(exc)
            settings = Settings()
        self.session.configure(settings, self.folders())
        return error

    async def settle(self, raw: Any) -> None:
        error = await asyncio.get_running_loop().run_in_executor(self.executor, self.apply_settings, raw)
        if error:
            self.show_error(error)

    def folders(self) -> list[Path]:
        out = []
        for folder in self.workspace.folders.values():
            p = to_fs_path(folder.uri)
            if p:
                out.append(Path(p))
        if not out and self.workspace.root_path:
            out.append(Path(self.workspace.root_path))
        return out

    def show_error(self, message: str) -> None:
        self.log(message)
        try:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"invariant-check: {message}"))
        except Exception:
            pass

    async def pull_settings(self) -> Any:
        caps = self.client_capabilities.workspace
        if caps is None or not caps.configuration:
            return None
        try:
            got = await self.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
            )
        except Exception as exc:
            self.log(f"could not read the client's settings: {exc}", types.MessageType.Warning)
            return None
        return got[0] if got else None

    # -- linting ---------------------------------------------------------------------------------------
    def schedule(self, uri: str, delay: float) -> None:
        old = self.pending.pop(uri, None)
        if old is not None:
            old.cancel()
        self.pending[uri] = asyncio.get_running_loop().create_task(self._lint_later(uri, delay))

    async def _lint_later(self, uri: str, delay: float) -> None:
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            await self.lint_now(uri)
        except asyncio.CancelledError:
            pass
        finally:
            if self.pending.get(uri) is asyncio.current_task():
                self.pending.pop(uri, None)

    async def lint_now(self, uri: str, *, dependents: bool = True) -> None:
        path = _path_of(uri)
        if path is None:
            return
        doc = self.workspace.get_text_document(uri)
        text, version = doc.source, doc.version
        data = text.encode("utf-8")
        loop = asyncio.get_running_loop()

        def lint() -> tuple[BufferResult, list[Path]]:
            old = self.session.buffers.get(path)
            result = self.session.lint(path, data)
            return result, (self.session.dependents(path, old, data) if dependents else [])

        try:
            result, others = await loop.run_in_executor(self.executor, lint)
        except ConfigError as exc:
            self.show_error(str(exc))
            self.publish(uri, version, [])
            return
        except Exception as exc:
            self.log_exception(f"{path}", exc)
            return
        if uri not in self.workspace.text_documents or self.workspace.get_text_document(uri).version != version:
            return  # closed, or a newer text is on its way: its lint publishes
        self.linted[uri] = _Linted(version, text, result.findings)
        # each once per session, not on every keystroke
        for message, kind in [*((p, types.MessageType.Error) for p in result.problems),
                              *((w, types.MessageType.Warning) for w in result.warnings)]:
            if message not in self.logged:
                self.logged.add(message)
                self.log(message, kind)
        self.publish(uri, version, self.diagnostics(uri, text, result))
        if dependents:
            for other in others:
                other_uri = from_fs_path(str(other))
                if other_uri and other_uri in self.workspace.text_documents:
                    await self.lint_now(other_uri, dependents=False)

    def publish(self, uri: str, version: int | None, diagnostics: list[types.Diagnostic]) -> None:
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version)
        )

    async def relint_all(self) -> None:
        for uri in list(self.workspace.text_documents):
            if _is_python(uri):
                await self.lint_now(uri, dependents=False)

    # -- conversions -------------------------------------------------------------------------------------
    def codec(self) -> PositionCodec:
        return self.workspace.position_codec

    def to_range(self, lines: list[str], line: int, column: int, end_line: int, end_column: int) -> types.Range:
        """1-based lines, 1-based character columns (end exclusive) -> the client's units."""
        start = ServerTextPosition(max(line - 1, 0), max(column - 1, 0))
        end = ServerTextPosition(max(end_line - 1, 0), max(end_column - 1, 0))
        return self.codec().range_to_client_units(lines, types.Range(start=start, end=end))

    def diagnostics(self, uri: str, text: str, result: BufferResult) -> list[types.Diagnostic]:
        from ..api.registry import all_rules

        lines = _lines(text)
        rules = all_rules()
        out = []
        for f in result.findings:
            rng = self.to_range(lines, f.line, f.column, f.end_line, f.end_column)
            rule = rules.get(f.rule)
            related = None
            if f.hint:
                related = [types.DiagnosticRelatedInformation(location=types.Location(uri=uri, range=rng), message=f.hint)]
            out.append(types.Diagnostic(
                range=rng,
                message=f"{f.message} [{f.name}]",
                severity=types.DiagnosticSeverity.Warning,
                code=f.rule,
                code_description=types.CodeDescription(href=rule_url(f.rule, f.name)) if rule is not None else None,
                source=SOURCE,
                related_information=related,
                tags=[types.DiagnosticTag.Unnecessary] if f.rule == "IC900" else None,
                data={"rule": f.rule, "name": f.name, "line": f.line, "column": f.column,
                      "fix": f.fix.applicability if f.fix is not None else None},
            ))
        for e in result.syntax_errors:
            line = e.line or 1
            col = e.column or 1
            rng = self.to_range(lines, line, col, line, col + 1)
            out.append(types.Diagnostic(
                range=rng, message=f"cannot lint: {e.message}", severity=types.DiagnosticSeverity.Error, source=SOURCE,
            ))
        return out

    # -- code actions --------------------------------------------------------------------------------------
    def code_actions(self, params: types.CodeActionParams, notes: list[tuple[str, types.MessageType]]) -> list[types.CodeAction]:
        """The actions for a range (in the lint thread: what to log goes to `notes`)."""
        uri = params.text_document.uri
        got = self.linted.get(uri)
        if got is None or uri not in self.workspace.text_documents:
            return []
        doc = self.workspace.get_text_document(uri)
        if doc.version != got.version:
            return []  # the findings are of another text: the next lint brings new ones
        only = params.context.only
        want_quick = only is None or any(_kind_within(types.CodeActionKind.QuickFix, k) for k in only)
        want_all = only is None or any(_kind_within(FIX_ALL_KIND, k) for k in only)
        lines = _lines(got.text)
        newline = _newline_of(got.text)
        actions: list[types.CodeAction] = []
        if want_quick:
            lo = self.codec().range_from_client_units(lines, params.range)
            for f in got.findings:
                if not (f.line - 1 <= lo.end.line and lo.start.line <= f.end_line - 1):
                    continue
                diag = self._diagnostic_for(params, f)
                if f.fix is not None and (f.fix.applicability == SAFE or self.session.settings.unsafe_fixes):
                    safe = f.fix.applicability == SAFE
                    edits = [
                        types.TextEdit(range=self.to_range(lines, e.line, e.column, e.end_line, e.end_column),
                                       new_text=e.content.replace("\n", newline))
                        for e in f.fix.edits
                    ]
                    actions.append(types.CodeAction(
                        title=f"{f.rule}: {f.fix.message}" + ("" if safe else " (unsafe)"),
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=diag,
                        is_preferred=safe,
                        edit=self._edit(uri, got.version, edits),
                    ))
                noqa = noqa_edit(got.text, f)
                if noqa is not None:
                    line_no, col, new = noqa
                    rng = self.to_range(lines, line_no, col, line_no, len(lines[line_no - 1].rstrip("\r\n")) + 1)
                    actions.append(types.CodeAction(
                        title=f"{f.rule}: suppress on this line (# noqa: {f.rule})",
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=diag,
                        is_preferred=False,
                        edit=self._edit(uri, got.version, [types.TextEdit(range=rng, new_text=new)]),
                    ))
        if want_all and any(f.fix is not None and f.fix.applicability == SAFE for f in got.findings):
            fixed = self._fix_all(uri, got, notes)
            if fixed is not None and fixed != got.text:
                # the whole text: from its start to the end of its last line
                whole = self.to_range(lines, 1, 1, len(lines), len(lines[-1]) + 1)
                actions.append(types.CodeAction(
                    title="invariant-check: fix all safe",
                    kind=FIX_ALL_KIND,
                    edit=self._edit(uri, got.version, [types.TextEdit(range=whole, new_text=fixed)]),
                ))
        return actions

    def _diagnostic_for(self, params: types.CodeActionParams, f: Finding) -> list[types.Diagnostic] | None:
        for d in params.context.diagnostics:
            data = d.data if isinstance(d.data, dict) else {}
            if d.code == f.rule and data.get("line") == f.line and data.get("column") == f.column:
                return [d]
        return None

    def _fix_all(self, uri: str, got: _Linted, notes: list[tuple[str, types.MessageType]]) -> str | None:
        """The text with every safe fix that verifies, in passes, as `lint --fix` makes it."""
        from ..fixing.fixes import FixError, run_fixes

        path = _path_of(uri)
        if path is None:
            return None
        data = got.text.encode("utf-8")
        state = self.session.state_for(path)

        def relint(given: dict[Path, bytes]):
            return self.session.lint(path, given.get(path, data))

        first = BufferResult(path, findings=list(got.findings))
        try:
            out = run_fixes(first, relint, unsafe=False, cwd=state.root, read=lambda _p: data)
        except FixError as exc:
            notes.append((str(exc), types.MessageType.Warning))
            return None
        finally:
            self.session.lint(path, data)  # the model back on the buffer's own text
        notes.extend((note, types.MessageType.Info) for note in out.notes)
        fixed = out.fixed.get(path)
        return fixed.decode("utf-8") if fixed is not None else None

    def _edit(self, uri: str, version: int | None, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
        caps = self.client_capabilities.workspace
        if caps is not None and caps.workspace_edit is not None and caps.workspace_edit.document_changes:
            return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                edits=edits,
            )])
        return types.WorkspaceEdit(changes={uri: edits})

    # -- hover ------------------------------------------------------------------------------------------------
    def hover(self, params: types.HoverParams) -> types.Hover | None:
        from ..api.registry import all_rules

        got = self.linted.get(params.text_document.uri)
        if got is None:
            return None
        lines = _lines(got.text)
        pos = self.codec().position_from_client_units(lines, params.position)
        here = [f for f in got.findings if f.line - 1 <= pos.line <= f.end_line - 1]
        if not here:
            return None
        rules = all_rules()
        parts = []
        for code in dict.fromkeys(f.rule for f in here):
            rule = rules.get(code)
            f = next(x for x in here if x.rule == code)
            if rule is None:
                parts.append(f"**{code}** {f.name}: {f.message}")
                continue
            text = f"**{code}** `{rule.NAME}`: {rule.SUMMARY}"
            why = why_section(rule.documentation())
            if why:
                text += f"\n\n{why}"
            text += f"\n\n[{code} {rule.NAME}]({rule_url(code, rule.NAME)})"
            parts.append(text)
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(parts)))


# -- helpers (no protocol state) -------------------------------------------------------------------------------


def _path_of(uri: str) -> Path | None:
    if not uri.startswith("file:"):
        return None
    p = to_fs_path(uri)
    return Path(os.path.abspath(p)) if p else None


def _is_python(uri: str) -> bool:
    return uri.endswith((".py", ".pyi"))


def _lines(text: str) -> list[str]:
    """Lines as Python and the linter count them (`\\r\\n`, `\\r`, `\\n`), with their endings."""
    out, start = [], 0
    for m in _NEWLINE.finditer(text):
        out.append(text[start : m.end()])
        start = m.end()
    out.append(text[start:])
    return out


def _newline_of(text: str) -> str:
    m = _NEWLINE.search(text)
    return m.group(0) if m else "\n"


def _kind_within(kind: str, asked: str) -> bool:
    """Whether an action of `kind` answers a request for `asked` (kinds are dotted prefixes)."""
    return kind == asked or kind.startswith(asked + ".")


def why_section(doc: str) -> str:
    """The first paragraph of a rule's "## Why is this bad?" section."""
    m = re.search(r"^## Why is this bad\?\s*\n(.*?)(?:\n\s*\n|\n## |\Z)", doc, re.S | re.M)
    return " ".join(m.group(1).split()) if m else ""


def noqa_edit(text: str, f: Finding) -> tuple[int, int, str] | None:
    """A suppression of `f` on its line, in the project's grammar: (line, 1-based column where
    the replaced tail of the line starts, the new tail). An existing suppression comment of ours
    gets the code added; a `# noqa: E501` of other tools gets it appended to its codes; any
    other comment stays, followed by ours. None where no comment can go (the line ends inside
    a string or with a backslash) or for findings about comments themselves."""
    from ..adoption.add_noqa import NOT_HERE, _extend, _places

    if f.rule in NOT_HERE:
        return None
    lines = _lines(text)
    if not 0 < f.line <= len(lines):
        return None
    body = lines[f.line - 1].rstrip("\r\n")
    comments, blocked = _places(text.replace("\r\n", "\n").replace("\r", "\n"))
    col = comments.get(f.line)
    if col is None:
        if f.line in blocked or body.rstrip().endswith("\\"):
            return None
        stripped = body.rstrip()
        return f.line, len(stripped) + 1, f"  # noqa: {f.rule}"
    comment = body[col:]
    extended = _extend(comment, f.line, [f.rule])
    if extended == comment:
        return None  # already suppressed
    if extended is None:
        m = re.match(r"#[ \t]*noqa:[ \t]*([A-Za-z]+[0-9]+(?:[ \t]*,[ \t]*[A-Za-z]+[0-9]+)*)", comment)
        if m:
            extended = comment[: m.end(1)] + f", {f.rule}" + comment[m.end(1):]
        else:
            extended = comment.rstrip() + f"  # noqa: {f.rule}"
    return f.line, col + 1, extended


# -- the server's features ---------------------------------------------------------------------------------------


def build() -> InvariantCheckServer:
    server = InvariantCheckServer()

    def guarded(what: str):
        """A feature that never raises into the session: the error becomes a log message."""

        def wrap(func):
            if asyncio.iscoroutinefunction(func):
                async def run_async(ls, params):
                    try:
                        return await func(ls, params)
                    except Exception as exc:
                        ls.log_exception(what, exc)
                        return None

                run_async.__name__ = func.__name__
                return run_async

            def run(ls, params):
                try:
                    return func(ls, params)
                except Exception as exc:
                    ls.log_exception(what, exc)
                    return None

            run.__name__ = func.__name__
            return run

        return wrap

    @server.feature(types.INITIALIZE)
    @guarded("initialize")
    def initialize(ls: InvariantCheckServer, params: types.InitializeParams):
        ls.init_settings = params.initialization_options
        error = ls.apply_settings(None)  # no lint runs before initialize returns
        if error:
            ls.show_error(error)

    @server.feature(types.INITIALIZED)
    @guarded("initialized")
    async def initialized(ls: InvariantCheckServer, params: types.InitializedParams):
        pulled = await ls.pull_settings()
        if pulled is not None:
            ls.client_settings = pulled
            await ls.settle(pulled)
            await ls.relint_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @guarded("didChangeConfiguration")
    async def did_change_configuration(ls: InvariantCheckServer, params: types.DidChangeConfigurationParams):
        raw = params.settings
        if isinstance(raw, dict) and SECTION in raw:
            raw = raw[SECTION]
        else:
            pulled = await ls.pull_settings()
            raw = pulled if pulled is not None else (raw if isinstance(raw, dict) and raw else ls.client_settings)
        ls.client_settings = raw
        await ls.settle(raw)
        await ls.relint_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    @guarded("didChangeWorkspaceFolders")
    async def did_change_folders(ls: InvariantCheckServer, params: types.DidChangeWorkspaceFoldersParams):
        await asyncio.get_running_loop().run_in_executor(ls.executor, ls.session.configure, None, ls.folders())
        await ls.relint_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    @guarded("didChangeWatchedFiles")
    async def did_change_watched(ls: InvariantCheckServer, params: types.DidChangeWatchedFilesParams):
        names = [Path(to_fs_path(c.uri) or "").name for c in params.changes]
        if "pyproject.toml" in names:
            await asyncio.get_running_loop().run_in_executor(ls.executor, ls.session.configure, None, None)
        else:
            ls.session.forget_listings()
        await ls.relint_all()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @guarded("didOpen")
    async def did_open(ls: InvariantCheckServer, params: types.DidOpenTextDocumentParams):
        if _is_python(params.text_document.uri) or params.text_document.language_id == "python":
            await ls.lint_now(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @guarded("didChange")
    def did_change(ls: InvariantCheckServer, params: types.DidChangeTextDocumentParams):
        uri = params.text_document.uri
        if _is_python(uri) or uri in ls.linted:
            ls.schedule(uri, ls.session.settings.debounce_ms / 1000)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    @guarded("didSave")
    async def did_save(ls: InvariantCheckServer, params: types.DidSaveTextDocumentParams):
        uri = params.text_document.uri
        loop = asyncio.get_running_loop()
        if uri.endswith("pyproject.toml"):
            await loop.run_in_executor(ls.executor, ls.session.configure, None, None)
            await ls.relint_all()
            return
        if not (_is_python(uri) or uri in ls.linted):
            return
        if uri not in ls.linted:
            ls.session.forget_listings()  # a new file: the project's listing may lack it
        await ls.lint_now(uri)
        for note in await loop.run_in_executor(ls.executor, ls.session.flush):
            ls.log(note, types.MessageType.Warning)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @guarded("didClose")
    def did_close(ls: InvariantCheckServer, params: types.DidCloseTextDocumentParams):
        uri = params.text_document.uri
        task = ls.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        ls.linted.pop(uri, None)
        path = _path_of(uri)
        if path is not None:
            ls.executor.submit(ls.session.close, path)
        ls.publish(uri, None, [])

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]),
    )
    @guarded("codeAction")
    async def code_action(ls: InvariantCheckServer, params: types.CodeActionParams):
        notes: list = []
        try:
            return await asyncio.get_running_loop().run_in_executor(ls.executor, ls.code_actions, params, notes)
        finally:
            for note, kind in notes:
                ls.log(note, kind)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @guarded("hover")
    def hover(ls: InvariantCheckServer, params: types.HoverParams):
        return ls.hover(params)

    @server.feature(types.SHUTDOWN)
    @guarded("shutdown")
    def shutdown(ls: InvariantCheckServer, params):
        for note in ls.executor.submit(ls.session.flush).result():
            ls.log(note, types.MessageType.Warning)

    return server


def serve() -> None:
    server = build()
    server.start_io()
    sys.exit(0)
