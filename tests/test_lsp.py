"""`invariant-check server` end to end: a real LSP client (pytest-lsp) starts the real server
over stdio and talks to it as an editor does. Every wait is on a notification or a response,
never on a clock."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types  # noqa: E402
from lsp_support import (  # noqa: E402
    CRASHING_SERVER,
    SERVER,
    apply_edit,
    change_doc,
    diagnostics,
    initialize,
    open_doc,
    wait_for,
)
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

PROPOSER = textwrap.dedent('''\
    class MTPProposer:
        def propose(self, model_kwargs, token_indices_to_sample):
            self.model.model.set_skip_topk(False)
            hidden_states = self.model(**model_kwargs)

            self.model.model.set_skip_topk(True)

            draft_token_ids = [self.sample(hidden_states[token_indices_to_sample])]
            for _ in range(self.num_speculative_tokens - 1):
                hidden_states = self.model(**model_kwargs)
                draft_token_ids.append(self.sample(hidden_states))
            return draft_token_ids
''')
IC002_LINE = 6  # the `set_skip_topk(True)` call, 1-based


def _project(tmp_path, extra_config: str = ""):
    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check]\n" + extra_config)
    path = tmp_path / "proposer.py"
    path.write_text(PROPOSER)
    return path


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=CRASHING_SERVER))
async def crashing_client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


def _codes(diags):
    return sorted(str(d.code) for d in diags)


@pytest.mark.asyncio
async def test_a_finding_is_published_fixed_by_its_code_action_and_goes_away(client: LanguageClient, tmp_path):
    path = _project(tmp_path)
    result = await initialize(client, tmp_path)
    assert result.capabilities.code_action_provider is not None
    assert result.capabilities.hover_provider
    uri = open_doc(client, path)
    (diag,) = await diagnostics(client, uri, lambda d: True)
    assert diag.code == "IC002" and diag.source == "invariant-check"
    assert diag.range.start.line == IC002_LINE - 1
    assert "skip-topk-without-compaction" in diag.message and "set_skip_topk(True)" in diag.message
    assert diag.code_description.href.endswith("/docs/rules/IC002-skip-topk-without-compaction.md")
    assert diag.related_information and "compact_topk_indices" in diag.related_information[0].message

    # hover on the flagged line: the rule's summary and why
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=IC002_LINE - 1, character=10),
    ))
    assert "IC002" in hover.contents.value and "skip-topk-without-compaction" in hover.contents.value
    assert "Why" not in hover.contents.value.split("\n")[0]
    from invariant_check.api.registry import all_rules

    assert all_rules()["IC002"].SUMMARY in hover.contents.value
    nothing = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=0),
    ))
    assert nothing is None

    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=diag.range,
        context=types.CodeActionContext(diagnostics=[diag]),
    ))
    fixes = [a for a in actions if "noqa" not in a.title]
    (fix,) = fixes
    assert fix.kind == types.CodeActionKind.QuickFix
    assert fix.title.endswith("(unsafe)") and not fix.is_preferred  # IC002's fix is unsafe
    assert list(fix.diagnostics) == [diag]
    fixed = apply_edit(PROPOSER, fix.edit, uri)
    assert "compact_topk_indices" in fixed
    compile(fixed, "proposer.py", "exec")
    change_doc(client, uri, fixed, version=2)
    assert await diagnostics(client, uri, lambda d: not d) == []


@pytest.mark.asyncio
async def test_the_suppression_action_writes_a_noqa_that_silences_the_finding(client: LanguageClient, tmp_path):
    path = _project(tmp_path)
    await initialize(client, tmp_path)
    uri = open_doc(client, path)
    (diag,) = await diagnostics(client, uri, lambda d: True)
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=diag.range,
        context=types.CodeActionContext(diagnostics=[diag]),
    ))
    (noqa,) = [a for a in actions if "noqa" in a.title]
    assert not noqa.is_preferred
    text = apply_edit(PROPOSER, noqa.edit, uri)
    assert text.splitlines()[IC002_LINE - 1] == "        self.model.model.set_skip_topk(True)  # noqa: IC002"
    change_doc(client, uri, text, version=2)
    assert await diagnostics(client, uri, lambda d: not d) == []


@pytest.mark.asyncio
async def test_fix_all_safe_applies_only_the_safe_fixes(client: LanguageClient, tmp_path):
    # IC900 (an unused suppression) has a safe fix; IC002's is unsafe and stays out of it
    path = _project(tmp_path, 'extend-select = ["IC900"]\n')
    text = PROPOSER.replace("return draft_token_ids", "return draft_token_ids  # noqa: IC001")
    await initialize(client, tmp_path)
    uri = open_doc(client, path, text)
    diags = await diagnostics(client, uri, lambda d: True)
    assert _codes(diags) == ["IC002", "IC900"]
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
        context=types.CodeActionContext(diagnostics=[], only=[types.CodeActionKind.SourceFixAll]),
    ))
    (fix_all,) = actions
    assert fix_all.kind.startswith("source.fixAll")
    fixed = apply_edit(text, fix_all.edit, uri)
    assert "noqa" not in fixed and "compact_topk_indices" not in fixed
    change_doc(client, uri, fixed, version=2)
    assert _codes(await diagnostics(client, uri, lambda d: _codes(d) != ["IC002", "IC900"])) == ["IC002"]


@pytest.mark.asyncio
async def test_a_settings_change_relints_open_documents(client: LanguageClient, tmp_path):
    path = _project(tmp_path)
    await initialize(client, tmp_path)
    uri = open_doc(client, path)
    assert _codes(await diagnostics(client, uri, lambda d: True)) == ["IC002"]
    client.set_configuration({"ignore": ["IC002"]}, section="invariant-check")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    assert await diagnostics(client, uri, lambda d: not d) == []
    # settings pushed with the notification itself
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"invariant-check": {"select": ["IC002"]}}))
    assert _codes(await diagnostics(client, uri, lambda d: bool(d))) == ["IC002"]


@pytest.mark.asyncio
async def test_the_pyproject_configuration_is_read_as_on_the_command_line(client: LanguageClient, tmp_path):
    path = _project(tmp_path, 'ignore = ["IC002"]\n')
    await initialize(client, tmp_path)
    uri = open_doc(client, path)
    assert await diagnostics(client, uri, lambda d: True) == []
    # the configuration is edited and saved in the editor: the projects are set up again
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text("[tool.invariant-check]\n")
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=cfg.as_uri())))
    assert _codes(await diagnostics(client, uri, lambda d: bool(d))) == ["IC002"]


@pytest.mark.asyncio
async def test_a_syntax_error_is_an_error_diagnostic_and_the_server_goes_on(client: LanguageClient, tmp_path):
    path = _project(tmp_path)
    await initialize(client, tmp_path)
    broken = PROPOSER.replace("def propose(self, model_kwargs, token_indices_to_sample):", "def propose(self, model_kwargs:")
    uri = open_doc(client, path, broken)
    (diag,) = await diagnostics(client, uri, lambda d: True)
    assert diag.severity == types.DiagnosticSeverity.Error and "syntax error" in diag.message
    assert diag.range.start.line == 1
    change_doc(client, uri, PROPOSER, version=2)
    assert _codes(await diagnostics(client, uri, lambda d: _codes(d) == ["IC002"])) == ["IC002"]


@pytest.mark.asyncio
async def test_the_buffer_is_linted_not_the_file_on_disk(client: LanguageClient, tmp_path):
    path = _project(tmp_path)
    path.write_text("x = 1\n")  # on disk: nothing to find
    await initialize(client, tmp_path)
    uri = open_doc(client, path, PROPOSER)
    assert _codes(await diagnostics(client, uri, lambda d: True)) == ["IC002"]


@pytest.mark.asyncio
async def test_an_edit_of_one_buffer_relints_the_open_buffer_that_reads_it(client: LanguageClient, tmp_path):
    # IC003: a model class defining set_skip_topk needs compact_topk_indices, here or in a base
    # class of another module; removing the base's method re-lints the subclass's buffer
    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check]\n")
    base_text = textwrap.dedent('''\
        class Base:
            def compact_topk_indices(self, rows):
                return rows
    ''')
    (tmp_path / "base.py").write_text(base_text)
    sub = tmp_path / "model.py"
    sub.write_text(textwrap.dedent('''\
        from base import Base


        class MultiTokenPredictor(Base):
            def set_skip_topk(self, skip):
                self.skip_topk = skip
    '''))
    await initialize(client, tmp_path)
    sub_uri = open_doc(client, sub)
    assert await diagnostics(client, sub_uri, lambda d: True) == []
    base_uri = open_doc(client, tmp_path / "base.py")
    await diagnostics(client, base_uri, lambda d: True)
    change_doc(client, base_uri, "class Base:\n    pass\n", version=2)
    assert _codes(await diagnostics(client, sub_uri, lambda d: bool(d))) == ["IC003"]


@pytest.mark.asyncio
async def test_a_failing_rule_becomes_a_log_message_and_the_others_still_report(crashing_client: LanguageClient, tmp_path):
    client = crashing_client
    path = _project(tmp_path, 'extend-select = ["IC992"]\n')
    await initialize(client, tmp_path)
    uri = open_doc(client, path)
    assert _codes(await diagnostics(client, uri, lambda d: True)) == ["IC002"]
    logged = await wait_for(client, types.WINDOW_LOG_MESSAGE, lambda: [
        m for m in client.log_messages if "IC992" in m.message
    ])
    assert "internal error in IC992 (crashing) checking `MTPProposer.propose`: KeyError" in logged[0].message
    assert logged[0].type == types.MessageType.Error
    # still serving
    change_doc(client, uri, PROPOSER.replace("set_skip_topk(True)", "set_skip_topk(False)"), version=2)
    assert await diagnostics(client, uri, lambda d: not d) == []


def test_without_pygls_the_server_command_says_what_to_install(tmp_path):
    # the import of pygls fails as it does where the `server` extra is not installed
    hide = "import sys; sys.modules['pygls'] = None; sys.modules['lsprotocol'] = None; from invariant_check.cli.commands import main; "
    done = subprocess.run([sys.executable, "-c", hide + "main(['server'])"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "`server` extra" in lines[0] and "pip install '.[server]'" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    # the linter itself does not need it
    path = _project(tmp_path)
    lint = subprocess.run([sys.executable, "-c", hide + f"main(['lint', '--no-cache', {str(path)!r}])"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert lint.returncode == 1 and "IC002" in lint.stdout, lint.stdout + lint.stderr
