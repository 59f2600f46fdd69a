"""The language server's linter side (`invariant_check.server.session`), without the protocol:
a buffer's text is linted with the project model of its folder, facts an edit left as they were
are carried over exactly, and a buffer's dependents are the open buffers that read it."""

from __future__ import annotations

import textwrap

from invariant_check.lint.cache import digest
from invariant_check.server.session import Session, Settings, SettingsError, carried_facts

import pytest

PROPOSER = textwrap.dedent('''\
    import torch


    def helper(x):
        return x + 1


    class MTPProposer:
        def prepare(self, batch):
            return helper(batch)

        def propose(self, model_kwargs, token_indices_to_sample):
            self.model.model.set_skip_topk(False)
            hidden_states = self.model(**model_kwargs)

            self.model.model.set_skip_topk(True)

            draft_token_ids = [self.sample(hidden_states[token_indices_to_sample])]
            for _ in range(self.num_speculative_tokens - 1):
                hidden_states = self.model(**model_kwargs)
                draft_token_ids.append(self.sample(hidden_states))
            return draft_token_ids

        def tail(self):
            return torch.zeros(1)


    def after():
        return helper(2)
''')

EDITS = [
    ("typing inside a line before the finding", lambda t: t.replace("return x + 1", "return x + 12")),
    ("a new line before the finding", lambda t: t.replace("    def prepare", "    # note\n    def prepare")),
    ("typing in the flagged method", lambda t: t.replace("hidden_states[token_indices_to_sample]", "hidden_states[token_indices_to_sample ]")),
    ("renaming the class", lambda t: t.replace("class MTPProposer", "class EagleProposer")),
    ("removing the switch", lambda t: t.replace("set_skip_topk(True)", "set_skip_topk(False)")),
    ("appending at the end", lambda t: t + "\n\nVALUE = 1\n"),
]


def _project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check]\n")
    path = tmp_path / "proposer.py"
    path.write_text(PROPOSER)
    return path


def _seen(result):
    return [(f.rule, f.line, f.column, f.message) for f in result.findings]


@pytest.mark.parametrize("what,edit", EDITS, ids=[e[0] for e in EDITS])
def test_after_an_edit_the_findings_and_facts_are_those_of_a_fresh_lint(tmp_path, what, edit):
    path = _project(tmp_path)
    warm = Session(folders=[tmp_path])
    first = warm.lint(path, PROPOSER.encode())
    assert [f.rule for f in first.findings] == ["IC002"]
    new = edit(PROPOSER)
    state = warm.state_for(path)
    old_facts = dict(state.cache.facts()[digest(PROPOSER.encode())])
    carried = carried_facts(PROPOSER, new, old_facts)
    again = warm.lint(path, new.encode())

    fresh_dir = tmp_path / "fresh"
    fresh_dir.mkdir()
    (fresh_dir / "pyproject.toml").write_text("[tool.invariant-check]\n")
    (fresh_dir / "proposer.py").write_text(new)
    fresh = Session(folders=[fresh_dir])
    expected = fresh.lint(fresh_dir / "proposer.py")
    assert _seen(again) == _seen(expected)
    # every carried chunk's facts are those computed afresh from the new text
    from invariant_check.analysis.outline import CLASS
    from invariant_check.analysis.project import Project

    module = Project(fresh_dir).module_at(fresh_dir / "proposer.py", new.encode())
    chunks = {}
    for chunk in list(module.outline.top()):
        chunks[chunk.key] = chunk
        if chunk.kind == CLASS:
            chunks.update((k.key, k) for k in module.outline.children(chunk))
    for key, facts in carried.items():
        got = facts.to_json() if hasattr(facts, "to_json") else facts
        assert got == module.chunk_facts(chunks[key]).to_json(), key
    if what != "renaming the class":
        assert carried, "an edit of one definition leaves the others' facts"


def test_the_buffer_not_the_disk_is_linted_and_the_cache_is_written_on_flush(tmp_path):
    path = _project(tmp_path)
    path.write_text("x = 1\n")
    session = Session(folders=[tmp_path])
    assert [f.rule for f in session.lint(path, PROPOSER.encode()).findings] == ["IC002"]
    cache_dir = tmp_path / ".invariant-check-cache"
    assert not any(cache_dir.glob("facts-*/*.json"))  # not on every keystroke
    assert session.flush() == []
    assert any(cache_dir.glob("facts-*/*.json"))


def test_an_open_buffer_that_read_another_is_its_dependent(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check]\n")
    base = tmp_path / "base.py"
    base.write_text("class Base:\n    def compact_topk_indices(self, rows):\n        return rows\n")
    model = tmp_path / "model.py"
    model.write_text("from base import Base\n\n\nclass M(Base):\n    def set_skip_topk(self, s):\n        self.s = s\n")
    other = tmp_path / "other.py"
    other.write_text("def f():\n    return 1\n")
    session = Session(folders=[tmp_path])
    for p in (base, model, other):
        session.open(p, p.read_bytes())
        session.lint(p)
    assert session.lint(model).findings == []
    new = b"class Base:\n    pass\n"
    assert session.dependents(base, base.read_bytes(), new) == [model]
    assert session.dependents(base, base.read_bytes(), base.read_bytes()) == []
    session.open(base, new)
    assert [f.rule for f in session.lint(model).findings] == ["IC003"]


def test_settings_from_the_client_are_checked():
    s = Settings.from_client({"select": ["IC002"], "extendSelect": "IC900", "debounce-ms": 0, "unsafeFixes": False})
    assert (s.select, s.extend_select, s.debounce_ms, s.unsafe_fixes) == (["IC002"], ["IC900"], 0, False)
    with pytest.raises(SettingsError, match="unknown key 'colour'"):
        Settings.from_client({"colour": 1})
    with pytest.raises(SettingsError, match="IC999"):
        Settings.from_client({"ignore": ["IC999"]})
    with pytest.raises(SettingsError, match="debounce-ms"):
        Settings.from_client({"debounceMs": -1})


def test_extra_paths_of_the_configuration_answer_imports_and_a_reconfigure_rereads_it(tmp_path):
    # the base class lives outside the project: found through `extra-paths`, as by `lint`
    outside, proj = tmp_path / "outside", tmp_path / "proj"
    outside.mkdir()
    proj.mkdir()
    (outside / "basemod.py").write_text("class Base:\n    def forward(self, x):\n        return x\n")
    model = proj / "model.py"
    model.write_text("from basemod import Base\n\n\nclass M(Base):\n    def set_skip_topk(self, s):\n        self.s = s\n")
    (proj / "pyproject.toml").write_text('[tool.invariant-check]\nextra-paths = ["../outside"]\n')
    session = Session(folders=[proj])
    assert [f.rule for f in session.lint(model).findings] == ["IC003"]
    # without it the base is unknown and IC003 stays silent; the session reads the file again
    (proj / "pyproject.toml").write_text("[tool.invariant-check]\n")
    session.configure()
    assert session.lint(model).findings == []
    # the client's `config` setting: one configuration for every file, relative to the folder
    (proj / "other.toml").write_text('extra-paths = ["../outside"]\n')
    session.configure(Settings(config="other.toml"))
    assert [f.rule for f in session.lint(model).findings] == ["IC003"]


def test_files_outside_the_workspace_folders_get_the_project_of_their_own_folder(tmp_path):
    # two unconfigured trees, no workspace folder: each file's project is found from its own
    # folder, as `lint -` run there finds it (one does not take the other's root)
    a, b = tmp_path / "a" / "pkg", tmp_path / "b" / "pkg"
    for d in (a, b):
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("")
    (a / "base.py").write_text("class Base:\n    def compact_topk_indices(self, rows):\n        return rows\n")
    (b / "base.py").write_text("class Base:\n    pass\n")
    text = b"from pkg.base import Base\n\n\nclass M(Base):\n    def set_skip_topk(self, s):\n        self.s = s\n"
    session = Session()
    assert session.lint(a / "model.py", text).findings == []
    assert [f.rule for f in session.lint(b / "model.py", text).findings] == ["IC003"]
    assert session.state_for(a / "model.py").root == tmp_path / "a"
    assert session.state_for(b / "model.py").root == tmp_path / "b"


def test_files_a_caller_search_read_are_answered_by_their_stat_on_the_next_edit(tmp_path, monkeypatch):
    # IC004 looks for the callers of a helper that advances its parameter's lengths: a search
    # of every file of the project for the helper's name. The files it had to read are known
    # by their stat afterwards, so the next edit's search does not read them again.
    import os

    from invariant_check.lint import engine as engine_mod

    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check]\n")
    (tmp_path / "meta.py").write_text(textwrap.dedent('''\
        from dataclasses import dataclass


        @dataclass
        class Meta:
            seq_lens: "torch.Tensor"
            max_seq_len: int
    '''))
    step = tmp_path / "step.py"
    step.write_text("def advance(md):\n    md.seq_lens += 1\n")
    for i in range(20):
        (tmp_path / f"other{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    old = 1_000_000_000  # the files were written long ago: their stat can be trusted
    for p in tmp_path.iterdir():
        os.utime(p, (old, old))
    reads: list[str] = []
    real = engine_mod.Engine._read_for_project

    def counting(self, path):
        reads.append(path.name)
        return real(self, path)

    monkeypatch.setattr(engine_mod.Engine, "_read_for_project", counting)
    session = Session(Settings(), [tmp_path])
    text = step.read_bytes()
    session.open(step, text)
    session.lint(step, text)
    first = [n for n in reads if n.startswith("other")]
    assert first, "the callers' search read no file: the test does not exercise it"
    reads.clear()
    session.lint(step, text + b"\n# an edit\n")
    assert [n for n in reads if n.startswith("other")] == []
