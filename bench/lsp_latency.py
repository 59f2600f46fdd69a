"""Latency of `invariant-check server`: from a `didChange` of an open vLLM file to the
`publishDiagnostics` for that version, with the whole vLLM 0.33.0 tree as the workspace.

    python bench/lsp_latency.py                              # unpacks ../shared/corpus/vllm-0.33.0.tar.xz
    python bench/lsp_latency.py --corpus PATH/vllm-0.33.0.tar.xz
    python bench/lsp_latency.py --tree /tmp/vllm-0.33.0      # an unpacked tree
    python bench/lsp_latency.py --file vllm/v1/spec_decode/eagle.py --repeats 20

The server runs as an editor starts it (`invariant-check server`, stdio, default settings: the
debounce is part of what is measured). The client (pygls) opens the file, waits for its first
diagnostics (a cold start), then edits it `--repeats` times, in turn: a comment line added at
the end, spaces typed at the end of a line halfway down, a comment line inserted halfway down;
each edit is timed to the diagnostics of that version (medians and p90 per kind and over all).

Positive control: one more edit adds a draft loop that turns on top-k reuse without
compacting (IC002's shape); its diagnostic must come back at the added line. The script exits
1 when a run fails, the control is not reported, or a diagnostic never comes; 0 otherwise.
The goal (0.3 s) is printed beside the numbers, not enforced: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent.parent / "shared" / "corpus" / "vllm-0.33.0.tar.xz"
GOAL_S = 0.3
WAIT_S = 300  # a diagnostic that takes longer than this is a failed run, not a slow one

CONTROL = '''

class _LatencyControlProposer:
    def propose(self, model_kwargs, token_indices_to_sample):
        self.model.model.set_skip_topk(False)
        hidden_states = self.model(**model_kwargs)
        self.model.model.set_skip_topk(True)
        draft_token_ids = [self.sample(hidden_states[token_indices_to_sample])]
        for _ in range(self.num_speculative_tokens - 1):
            hidden_states = self.model(**model_kwargs)
            draft_token_ids.append(self.sample(hidden_states))
        return draft_token_ids
'''


# The edits timed, in turn: none changes what the rules find.
EDITS = {
    # a comment line added at the end (the definitions before it keep their offsets)
    "end": lambda lines, middle, i: "".join(lines) + f"\n# edit {i}\n",
    # typing inside a line halfway down (spaces at its end): later definitions move, lines do not
    "middle, in a line": lambda lines, middle, i: "".join(
        lines[:middle] + [lines[middle].rstrip("\n") + " " * (i + 1) + "\n"] + lines[middle + 1 :]),
    # a new comment line halfway down: every later line moves
    "middle, new line": lambda lines, middle, i: "".join(lines[:middle] + [f"# edit {i}\n"] + lines[middle:]),
}


def fail(message: str) -> None:
    print(f"lsp_latency: error: {message}", file=sys.stderr)
    sys.exit(1)


def unpack(tarball: Path, dest: Path) -> Path:
    if not tarball.is_file():
        fail(f"{tarball}: no such file (give --corpus or --tree)")
    with tarfile.open(tarball) as tar:
        tar.extractall(dest, filter="data")
    (tree,) = [p for p in dest.iterdir() if p.is_dir()]
    return tree


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process so far (Linux), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_command() -> list[str]:
    exe = Path(sys.executable).with_name("invariant-check")
    if exe.is_file():
        return [str(exe), "server"]
    return [sys.executable, "-c", "from invariant_check.cli.commands import main; main()", "server"]


async def run(tree: Path, rel: str, repeats: int) -> dict:
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("lsp-latency", "1")
    published: dict[int | None, list] = {}
    arrived = asyncio.Event()
    logs: list[str] = []
    uri = (tree / rel).as_uri()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diagnostics(params: types.PublishDiagnosticsParams):
        if params.uri == uri:
            published[params.version] = (time.perf_counter(), list(params.diagnostics))
            arrived.set()

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def on_log(params: types.LogMessageParams):
        logs.append(params.message)

    async def until(version: int) -> tuple[float, list]:
        deadline = time.perf_counter() + WAIT_S
        while version not in published:
            arrived.clear()
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"no diagnostics for version {version} of {rel}")
            await asyncio.wait_for(arrived.wait(), left)
        return published[version]

    cmd = server_command()
    await client.start_io(cmd[0], *cmd[1:])
    try:
        await client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=tree.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=tree.as_uri(), name=tree.name)],
        ))
        client.initialized(types.InitializedParams())
        text = (tree / rel).read_text(encoding="utf-8")
        t0 = time.perf_counter()
        client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=text)))
        got_at, first = await until(1)
        cold = got_at - t0
        times: dict[str, list[float]] = {kind: [] for kind in EDITS}
        pid = getattr(getattr(client, "_server", None), "pid", None)
        cpu: list[float] = []
        version = 1
        lines = text.splitlines(keepends=True)
        middle = len(lines) // 2
        for i in range(repeats):
            kind = list(EDITS)[i % len(EDITS)]
            version += 1
            new = EDITS[kind](lines, middle, i)
            cpu_before = cpu_seconds(pid)
            sent = time.perf_counter()
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=new)]))
            got_at, diags = await until(version)
            times[kind].append(got_at - sent)
            cpu_after = cpu_seconds(pid)
            if cpu_before is not None and cpu_after is not None:
                cpu.append(cpu_after - cpu_before)
            if len(diags) != len(first):
                raise RuntimeError(f"an edit ({kind}) changed the findings of {rel}: {len(first)} -> {len(diags)}")
        # positive control
        version += 1
        control_text = text + CONTROL
        control_line = len(text.splitlines()) + CONTROL.count("\n", 0, CONTROL.index("set_skip_topk(True)")) + 1
        sent = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=control_text)]))
        got_at, diags = await until(version)
        control_s = got_at - sent
        hit = [d for d in diags if d.code == "IC002" and d.range.start.line + 1 == control_line]
        await client.shutdown_async(None)
        client.exit(None)
    finally:
        await client.stop()
    return {"cold": cold, "times": times, "cpu": cpu, "control": bool(hit), "control_s": control_s,
            "control_line": control_line, "first": len(first), "logs": logs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS, help=f"the vLLM 0.33.0 tarball to unpack into a temporary folder [default: {CORPUS}]")
    ap.add_argument("--tree", type=Path, help="an unpacked vLLM 0.33.0 tree instead of the tarball")
    ap.add_argument("--file", default="vllm/v1/spec_decode/llm_base_proposer.py", help="the file to edit, relative to the tree")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    try:
        import pygls  # noqa: F401
    except ImportError:
        fail("needs the server extra (in a checkout: pip install '.[server]')")
    with tempfile.TemporaryDirectory(prefix="lsp-latency-") as tmp:
        tree = args.tree.resolve() if args.tree else unpack(args.corpus, Path(tmp))
        if not (tree / args.file).is_file():
            fail(f"{tree / args.file}: no such file")
        try:
            out = asyncio.run(run(tree, args.file, args.repeats))
        except Exception as exc:
            fail(f"run failed: {type(exc).__name__}: {exc}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    print(f"file: {args.file} ({out['first']} finding(s) before the edits); commit {commit or '?'}; {os.cpu_count()} CPU(s)")
    print(f"open -> first diagnostics (cold): {out['cold']:.3f} s")
    every = sorted(t for ts in out["times"].values() for t in ts)
    for kind, ts in [*out["times"].items(), ("all edits", every)]:
        if ts:
            ts = sorted(ts)
            p90 = ts[min(len(ts) - 1, max(0, round(0.9 * len(ts)) - 1))]
            print(f"didChange -> publishDiagnostics, {kind} ({len(ts)}): median {statistics.median(ts):.3f} s, "
                  f"p90 {p90:.3f} s, min {ts[0]:.3f} s, max {ts[-1]:.3f} s (goal {GOAL_S} s)")
    if out["cpu"]:
        print(f"server CPU time per edit (user + system, 10 ms ticks): median {statistics.median(out['cpu']):.3f} s, "
              f"max {max(out['cpu']):.3f} s")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if load is not None:
        print(f"load average (1 min) at the end: {load:.1f}")
    print(f"positive control (IC002 at line {out['control_line']}): {'reported' if out['control'] else 'MISSING'} "
          f"in {out['control_s']:.3f} s")
    for line in out["logs"]:
        print(f"server log: {line}")
    if not out["control"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
