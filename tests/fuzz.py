"""Seeded fuzz cases for the promises of docs/cli.md: any input gives exit 0, 1 or 2,
never a traceback; a failure is one line on stderr; nothing the user had is lost and
no temporary file is left behind.

Classes: saved artifacts mutated (``artifact_cases``: a real output directory's
``lineage.json``, ``profile.json``, ``run.json``, ``compare.json``, ``code.json`` and
reference CSVs, read by ``render``, ``query``, ``diff``), a bundle's files tampered
with, run by its ``run.py`` (``bundle_cases``), an LLM served with bad, huge and
small serving options (``serving_cases``), legacy texts mutated (``legacy_cases``: the seed threads'
tables, IR and logs, read by the legacy parsers), command lines (``option_cases``),
hostile names in every text output (``name_cases``), output-directory layouts given
to ``--force`` (``layout_cases``), a whole run signalled at each of its writes
(``signal_cases``), and a remote profile whose server stops answering at each of its
steps (``stopped_server_cases``). ``tests/test_fuzz.py`` runs a few hundred of the first ones;
``tools/fuzz.py`` runs many more of each and prints the counts.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
from pathlib import Path

from relaytrace.cli import main

SEEDS = Path(__file__).parent / "fixtures" / "seeds"


def run_cli(argv) -> tuple[int, str, str]:
    """``relaytrace ARGV`` in this process: (exit code, stdout, stderr). An exception
    escaping ``main`` is returned as code -1 with its type in stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # noqa: BLE001 - what the fuzz looks for
            code, err = -1, io.StringIO(f"ESCAPED {type(exc).__name__}: {exc}")
    return code, out.getvalue(), err.getvalue()


def broken_promise(code: int, err: str) -> str | None:
    """What is wrong with a run's ending, or None: codes 0/1/2, and a failure said in one
    ``relaytrace:`` line (progress lines before it are allowed)."""
    if code not in (0, 1, 2):
        return f"exit code {code}: {err[-300:]}"
    if code and not (err.strip().splitlines() or [""])[-1].startswith("relaytrace:"):
        return f"no one-line error: {err[-300:]}"
    if "Traceback" in err:
        return f"a traceback: {err[-300:]}"
    if "an unexpected " in err:  # the safety net caught it: no message names the problem
        return f"unexplained: {err.strip().splitlines()[-1][:300]}"
    return None


# -- mutations ------------------------------------------------------------------


def _mutate_value(value, rng: random.Random):
    choice = rng.randrange(9)
    if choice == 0:
        return None
    if choice == 1:
        return "x" * rng.randrange(3)
    if choice == 2:
        return [] if isinstance(value, dict) else {}
    if choice == 3:
        return 1e308 * rng.choice((1, -1, 10))  # 1e309 is inf
    if choice == 4:
        return -rng.randrange(1, 10)
    if choice == 5:
        return [value, value] if not isinstance(value, list) else value[:1]
    if choice == 6:
        return str(value)
    if choice == 7:
        return True
    return rng.randrange(-2, 2**70)


def _paths(data, prefix=()):
    """Every (path, value) in a JSON tree, lists sampled to keep it small."""
    yield prefix, data
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i in sorted({0, len(data) // 2, len(data) - 1}) if data else ():
            yield from _paths(data[i], prefix + (i,))


def mutate_json(data, rng: random.Random):
    """(a copy of ``data`` with one value replaced, a key deleted or renamed, what was done)."""
    data = json.loads(json.dumps(data))
    paths = [p for p, _ in _paths(data) if p]
    path = rng.choice(paths)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    action = rng.randrange(4)
    where = "/".join(map(str, path))
    if action == 0 and isinstance(parent, dict):
        del parent[last]
        return data, f"{where} deleted"
    if action == 1 and isinstance(parent, dict):
        parent[f"{last}_"] = parent.pop(last)
        return data, f"{where} renamed"
    parent[last] = _mutate_value(parent[last], rng)
    return data, f"{where} = {json.dumps(parent[last])[:40]}"


def mutate_bytes(raw: bytes, rng: random.Random) -> bytes:
    choice = rng.randrange(6)
    if choice == 0:
        return raw[: rng.randrange(len(raw) + 1)]  # truncated
    if choice == 1:
        return raw.decode().encode("utf-16")
    if choice == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if choice == 3:
        return b"\xef\xbb\xbf" + raw  # a byte-order mark
    if choice == 4:
        return b""
    at = rng.randrange(len(raw) + 1)
    return raw[:at] + bytes([rng.randrange(256)]) + raw[at:]


def mutate_text(text: str, rng: random.Random) -> str:
    """Edits a paste picks up on a forum: runs of spaces collapsed, blank lines, lines
    lost or doubled, numbers huge or gone, one very long line, a cut."""
    lines = text.splitlines()
    choice = rng.randrange(9)
    if choice == 0:
        import re

        return re.sub(r" {2,}", " ", text)
    if choice == 1 and lines:
        lines.insert(rng.randrange(len(lines)), "")
    elif choice == 2 and lines:
        del lines[rng.randrange(len(lines))]
    elif choice == 3 and lines:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif choice == 4:
        import re

        return re.sub(r"\d+(\.\d+)?", lambda m: rng.choice(("9" * 400, "0", "-1", "nan", "")), text, count=50)
    elif choice == 5:
        return text + "\n" + "(" * 40_000 + "%x = nn.conv2d(" * 2_000
    elif choice == 6:
        return text[: rng.randrange(len(text) + 1)]
    elif choice == 7 and lines:
        i = rng.randrange(len(lines))
        lines[i] = lines[i][: len(lines[i]) // 2]  # a misaligned row
    else:
        return text.replace("\n", "\r\n")
    return "\n".join(lines)


# -- the case classes --------------------------------------------------------------

ARTIFACTS = ("lineage.json", "profile.json", "run.json", "compare.json", "code.json")  # those the source has


def artifact_cases(source: Path, work: Path, seed: int, count: int):
    """``count`` runs of reading commands on mutated copies of the output directory
    ``source``; yields (what, broken promise or None)."""
    rng = random.Random(seed)
    originals = {name: (source / name).read_bytes() for name in ARTIFACTS if (source / name).is_file()}
    for i in range(count):
        case = work / f"case{i}"
        shutil.copytree(source, case)
        name = rng.choice(sorted(originals))
        if rng.random() < 0.75:
            data, change = mutate_json(json.loads(originals[name]), rng)
            mutated = json.dumps(data).encode()
        else:
            mutated, change = mutate_bytes(originals[name], rng), "bytes mangled"
        (case / name).write_bytes(mutated)
        lineage = case / "lineage.json"
        argv = rng.choice(
            [
                ["render", case, "--format", "dot", "--out", case / "g.dot"],
                ["render", case, "--format", "html", "--out", case / "r.html"],  # with compare.json beside it
                ["render", case, "--graph", "kernels", "--format", "dot", "--out", case / "k.dot"],
                ["query", lineage, "--layer", rng.choice(("conv1", "fc", "nope", ""))],
                ["query", lineage, "--kernel", rng.choice(("fused_conv2d_add_relu", "x#0", "#", ""))],
                ["query", lineage, "--history", "conv1", "--json"],
                ["query", case, "--code", rng.choice(("conv1", "fc", "relu"))],
                ["diff", case, source],
                ["diff", source, case, "--by-layer"],
                ["tasks", case, "--target", "bogus"],  # reads run.json, then refuses the target: no build
            ]
        )
        before = {p.name for p in case.iterdir()}
        code, _, err = run_cli(argv)
        problem = broken_promise(code, err)
        left = {p.name for p in case.iterdir()} - before - {"g.dot", "r.html", "k.dot"}
        if problem is None and left:
            problem = f"left behind: {sorted(left)}"
        if problem is None and code and (case / name).read_bytes() != mutated:
            problem = f"{name} changed by a failed command"
        yield f"{name}: {change}; {' '.join(map(str, argv[:1] + argv[2:]))}", problem
        shutil.rmtree(case)


def make_bundle(directory: Path, model: str) -> Path:
    """``relaytrace bundle MODEL --out DIRECTORY``: the bundle ``bundle_cases`` tampers with."""
    code, _, err = run_cli(["--quiet", "bundle", model, "--out", directory])
    assert code == 0, err
    return directory


def _tamper(bundle: Path, rng: random.Random) -> tuple[str, bool]:
    """One change to a copy of a bundle: bundle.json mutated, or a sealed file other than
    run.py (the code that checks the seals cannot vouch for itself) cut short, a byte of
    it changed, garbage appended, emptied, removed, or made a link out of the bundle.
    (what was done, whether a sealed file's bytes changed)."""
    manifest = json.loads((bundle / "bundle.json").read_text())
    if rng.random() < 0.5:
        data, change = mutate_json(manifest, rng)
        (bundle / "bundle.json").write_text(json.dumps(data))
        return f"bundle.json: {change}", False
    name = rng.choice(sorted(set(manifest["files"]) - {"run.py"}))  # the runner cannot vouch for itself
    path = bundle / name
    raw = path.read_bytes()
    choice = rng.randrange(6)
    if choice == 0:
        cut = rng.randrange(len(raw))
        path.write_bytes(raw[:cut])
        return f"{name} cut to {cut} bytes", True
    if choice == 1:
        at = rng.randrange(len(raw))
        path.write_bytes(raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1 :])
        return f"{name}: byte {at} flipped", True
    if choice == 2:
        path.write_bytes(raw + bytes(rng.randrange(256) for _ in range(64)))
        return f"{name}: garbage appended", True
    if choice == 3:
        path.write_bytes(b"")
        return f"{name} emptied", True
    if choice == 4:
        path.unlink()
        return f"{name} removed", True
    outside = bundle.parent / f"outside-{rng.randrange(10**6)}"
    outside.write_bytes(raw)
    path.unlink()
    path.symlink_to(outside)
    return f"{name} a link out of the bundle", True


def bundle_cases(bundle: Path, work: Path, seed: int, count: int, timeout_s: float = 120.0):
    """``count`` runs of a tampered copy's ``run.py`` (``_tamper``); yields (what,
    broken promise or None). Kept: exit 0 or 1, a failure one ``run.py: error:`` line
    with no traceback, no death by a signal, no hang past ``timeout_s``, no profile.json
    written by a failed run, and no run at all of a bundle whose sealed file changed."""
    import subprocess
    import sys

    rng = random.Random(seed)
    for i in range(count):
        case = work / f"bundle{i}"
        shutil.copytree(bundle, case, symlinks=True, ignore=shutil.ignore_patterns("profile.json", "report"))
        what, sealed = _tamper(case, rng)
        try:
            done = subprocess.run(
                [sys.executable, str(case / "run.py"), "--repeat", "1", "--no-peaks"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                cwd=work,
            )
        except subprocess.TimeoutExpired:
            yield what, f"a hang: run.py still running after {timeout_s:g} s"
            continue
        last = (done.stderr.strip().splitlines() or [""])[-1]
        if done.returncode < 0:
            problem = f"killed by signal {-done.returncode}: {done.stderr[-300:]}"
        elif done.returncode not in (0, 1) or "Traceback" in done.stderr:
            problem = f"exit {done.returncode}, a traceback: {done.stderr[-300:]}"
        elif done.returncode == 1 and not last.startswith("run.py: error: "):
            problem = f"no one-line error: {done.stderr[-300:]}"
        elif done.returncode == 1 and (case / "profile.json").exists():
            problem = "a failed run wrote profile.json"
        elif done.returncode == 0 and sealed:
            problem = "a bundle whose sealed file changed ran"
        else:
            problem = None
        yield what, problem
        shutil.rmtree(case)


def _plan(d):
    return d["build"]["memory"]["main"]


def _first_kernel(d):
    """The profile's first kernel call: its ``kernel#call`` key."""
    return next(r for r in d["records"] if r[5] == "kernel")[:2]


def _widen(d):
    kernel, call = _first_kernel(d)
    d["args"][f"{kernel}#{call}"]["shapes"][-1][1] *= 2  # its output at twice the width


# (file, an edit of its JSON whose every field keeps its type but contradicts another
# or the lineage, words of the one-line refusal): model/sense.py's checks, each once
CONTRADICTIONS = [
    ("lineage.json", lambda d: _plan(d)["blocks"][0].__setitem__("bytes", [[10**30, []]]), "at most 1.15292e+18"),
    ("lineage.json", lambda d: _plan(d).__setitem__("steps", []), "in a plan of 0 steps a lifetime starts at 0"),
    (
        "lineage.json",
        lambda d: _plan(d)["blocks"][0]["tensors"][0].__setitem__("site", "nope#0"),
        "site 'nope#0' is none of the plan's steps",
    ),
    (
        "lineage.json",
        lambda d: _plan(d).__setitem__("steps", list(reversed(_plan(d)["steps"]))),
        "is no call site of main after the one before it",
    ),
    (
        "lineage.json",
        lambda d: _plan(d)["blocks"][0]["tensors"][0].update(first=99, last=-3),
        "is live from step 99 to -3",
    ),
    (
        "lineage.json",
        lambda d: _plan(d)["blocks"][0]["tensors"][0].__setitem__("dtype", "float7"),
        "dtype 'float7' is not a dtype TVM has",
    ),
    (
        "lineage.json",
        lambda d: next(iter(d["build"]["work"].values())).__setitem__("flops", [[-5, []]]),
        "has the term -5: a count is at least 0",
    ),
    (
        "lineage.json",
        lambda d: next(iter(d["build"]["work"].values()))["params"][0][0].__setitem__(0, [16, 16]),
        "has a dim that is neither a size nor a symbolic dim",
    ),
    (
        "lineage.json",
        lambda d: d["verification"]["layers"].append({"layer": "ghost", "status": "verified"}),
        "verification of layer 'ghost' is not what the lineage's own evidence gives",
    ),
    (
        "lineage.json",
        lambda d: d["verification"].__setitem__("sites", []),
        "verification of call site position 0 is not what the lineage's own evidence gives",
    ),
    (
        "lineage.json",
        lambda d: [r.__setitem__("role", "fused") for r in next(iter(d["kernels"].values()))[0]["roles"]],
        "has roles its origins do not give (anchor 'none'",
    ),
    ("lineage.json", lambda d: d["origins"].append(dict(d["origins"][0])), "twice: an id names one op"),
    ("lineage.json", lambda d: d["origins"][0].__setitem__("layer", "conv1\ud800"), "holds a lone surrogate escape"),
    ("profile.json", lambda d: d["peaks"].__setitem__("gbps", 1e-300), "every peak rate must be from 0.001"),
    ("profile.json", lambda d: d.__setitem__("e2e_us", [0.0] * len(d["e2e_us"])), "each e2e_us above 0"),
    ("profile.json", lambda d: d.__setitem__("repeat", 10**9), "repeat must be 1 to 1e+06"),
    ("profile.json", lambda d: [r.__setitem__(3, 0.0) for r in d["records"]], "calls of one run follow one another"),
    (
        "profile.json",
        lambda d: d["inputs"][0][1].__setitem__(0, 2),
        "input 0 (x) of tiny_model.main must be float32[1, ",
    ),
    ("profile.json", _widen, "ran as float32["),
]


# compare.json edits that keep every type (a comparison of the tiny model, as `relaytrace
# compare` wrote it), with the words of the refusal; read by `render` beside the lineage
COMPARISONS = [
    (lambda d: d["layers"][0].__setitem__("nan", -3), "layers[0].nan must be at least 0"),
    (lambda d: d["layers"][0].__setitem__("reference_nan", -1), "layers[0].reference_nan must be at least 0"),
    (lambda d: d["layers"][0].__setitem__("max_abs", -0.5), "layers[0].max_abs must be at least 0"),
    (lambda d: d["layers"][0].__setitem__("tolerance_ratio", -2.0), "layers[0].tolerance_ratio must be at least 0"),
    (lambda d: d["layers"][0].__setitem__("shape", [-1, 4]), "layers[0].shape must be at least 0"),
    (lambda d: d["layers"][0].__setitem__("cosine", 3.0), "layers[0].cosine must be from -1 to 1"),
    (lambda d: d.__setitem__("atol", -1e-4), "atol must be at least 0"),
    (
        lambda d: d["layers"][0].update(status="within", tolerance_ratio=1e6),
        "layers[0] is within tolerance at a tolerance ratio of 1e",
    ),
    (lambda d: d["layers"].append(dict(d["layers"][0])), "again: each layer is compared once"),
    (
        lambda d: d["layers"][0].update(status="beyond", tolerance_ratio=0.0, nan=0, inf=0),
        "layers[0] is beyond tolerance at a tolerance ratio of 0",
    ),
]

# `diff --reference` tables that say two things, with the words of the refusal
REFERENCES = [
    ("layer,time_us\nconv1,12\nfc,3\nconv1,1\n", "ref.csv:4: layer 'conv1' is listed again (first on line 2)"),
    ("layer,time_us,time_ms\nconv1,12,0.5\n", "ref.csv: has both time_us and time_ms: keep one"),
    ("layer,time_us,layer\nconv1,12,fc\n", "ref.csv: has the column layer twice"),
    ("layer,time_us\nconv1,1\n" + "x" * 200_000 + ",1\n", "ref.csv:3: not a CSV table of layer times (field larger"),
    ("layer,time_us\nconv1,nan\n", "ref.csv:2: time_us 'nan' is not a time"),
]


def make_source(directory: Path, model: str) -> Path:
    """``directory``: the profile outputs of ``model`` (file.py:factory) with the
    compare.json of `relaytrace compare` beside them (render's html reads it), as the
    classes that mutate saved files take them."""
    for argv in (
        ["profile", model, "--repeat", "1", "--out", directory],
        ["compare", model, "--out", directory.with_name(directory.name + "-cmp")],
    ):
        code, _, err = run_cli(["--quiet", *argv])
        if code:
            raise RuntimeError(f"could not make the fuzz source ({argv[0]}): {err.strip()}")
    shutil.copy(directory.with_name(directory.name + "-cmp") / "compare.json", directory / "compare.json")
    return directory


def readers(case: Path, other: Path) -> list[list]:
    """The commands that read an output DIR's lineage and profile together."""
    return [
        ["render", case, "--format", "html", "--out", case / "r.html"],
        ["advise", case],
        ["memory", case],
        ["diff", case, other],
    ]


def contradiction_cases(source: Path, work: Path, seed: int, count: int):
    """``count`` runs of a reading command on a copy of ``source`` (``make_source``'s)
    with one contradiction made: a lineage's or profile's (``CONTRADICTIONS``, read by
    ``readers`` and ``query``), a compare.json's (``COMPARISONS``, read by ``render``) or
    a reference table's (``REFERENCES``, read by ``diff --reference``), of the files the
    source has: refused (code 1, one line), never accepted, nothing written; yields
    (what, broken promise or None)."""
    rng = random.Random(seed)
    kinds = (
        [(name, edit, words, None) for name, edit, words in CONTRADICTIONS]
        + [("compare.json", edit, words, None) for edit, words in COMPARISONS]
        + [("ref.csv", None, words, table) for table, words in REFERENCES]
    )
    kinds = [kind for kind in kinds if kind[3] is not None or (source / kind[0]).is_file()]  # what the source has
    for i in range(count):
        name, edit, words, table = rng.choice(kinds)
        case = work / f"contra{i}"
        shutil.copytree(source, case)
        if table is not None:
            (case / name).write_text(table)
            commands = [["diff", case, "--reference", case / name]]
        else:
            data = json.loads((case / name).read_text())
            edit(data)
            (case / name).write_text(json.dumps(data))
            commands = (
                [["render", case, "--format", "html", "--out", case / "r.html"]]
                if name == "compare.json"
                else readers(case, source)
                + [["query", case / "lineage.json", "--layer", "fc"]] * (name == "lineage.json")
            )
        argv = rng.choice(commands)
        before = {p.name for p in case.iterdir()}
        code, _, err = run_cli(argv)
        problem = broken_promise(code, err)
        if problem is None and code != 1:
            problem = f"accepted (exit {code})"
        elif problem is None and words not in err:
            problem = f"refused for another reason: {err.strip()[-200:]}"
        if problem is None and {p.name for p in case.iterdir()} != before:
            problem = "wrote or removed a file"
        yield f"{name}: {words}; {argv[0]}", problem
        shutil.rmtree(case)


def legacy_cases(work: Path, seed: int, count: int):
    """``count`` mutated seed texts through ``relaytrace legacy`` (every parser, the
    matching and the figures); yields (what, problem): a broken promise, or over 2 s."""
    import time

    rng = random.Random(seed)
    texts = [p.read_text() for p in sorted(SEEDS.glob("*.txt"))]
    paste = work / "paste.txt"
    for i in range(count):
        text = rng.choice(texts)
        changes = rng.randrange(1, 4)
        for _ in range(changes):
            text = mutate_text(text, rng)
        paste.write_text(text)
        flags = rng.sample(["--relay-ir", "--report", "--autotvm-tasks", "--autotvm-log"], rng.randrange(1, 5))
        argv = ["legacy"] + [x for flag in flags for x in (flag, paste)]
        start = time.perf_counter()
        code, _, err = run_cli(argv)
        seconds = time.perf_counter() - start
        problem = broken_promise(code, err)
        if problem is None and seconds > 2.0:
            problem = f"took {seconds:.1f} s on {len(text)} characters"
        yield f"legacy case {i} ({changes} edits, {' '.join(flags)})", problem


def option_cases(source: Path, work: Path, seed: int, count: int):
    """Command lines with bad values, each drawn afresh: refused with the expected exit
    code (2 for the command line, 1 for a file that is not there) before any build,
    nothing written."""
    rng = random.Random(seed)
    out = ["--out", str(work / "o")]

    def pick(*values):
        return rng.choice(values)

    cases = [
        lambda: (["profile", "m.py:make", "--repeat", pick("0", "-3", "x", "1e3"), *out], 2),
        lambda: (["profile", "m.py:make", "--collapse", pick("-2", "-1", "deep"), *out], 2),
        lambda: (["profile", "m.py:make", "--target", pick("bogus", "{", '{"kind": 3}', ""), *out], 2),
        lambda: (["profile", "m.py:make", "--kernel-timeout", pick("0", "-1", "nan", "inf"), "--rpc", "h:1", *out], 2),
        lambda: (["profile", "m.py:make", "--rpc", pick("nohost", "h:x", ":1"), *out], 2),
        lambda: (["profile", "m.py:make", "--rpc", "h:1", "--tracker", "h:2", "--key", "k", *out], 2),
        lambda: (["profile", "m.py:make", "--cc", "g++", *out], 2),
        lambda: (
            ["profile", "m.py:make", "--input-shape", pick("x", "x:1xA", ":1x2", "x:0x3", "x:1x2:nodtype"), *out],
            2,
        ),
        lambda: (["profile", pick("m.txt", "m.py", "model"), *out], 2),
        lambda: (["profile", "missing.onnx", *out], 1),
        lambda: (["profile", f"{work}/missing.py:make", *out], 1),
        lambda: (
            ["render", str(source), "--format", "png", "--out", f"{work}/x.{pick('svg', 'pdf', 'html', 'dot')}"],
            2,
        ),
        lambda: (["render", str(source), "--format", "html", "--out", f"{work}/x.svg"], 2),
        lambda: (["query", str(source / "lineage.json"), pick("--kernel", "--layer", "--history"), ""], 2),
        lambda: (["query", str(source / "lineage.json"), "--layer", "conv1", "--history", "conv1"], 2),
        lambda: (["query", f"{work}/missing.json", "--layer", "x"], 1),
        lambda: (["diff", str(source)], 2),
        lambda: (["diff", str(source), f"{work}/nowhere"], 1),
        lambda: (["diff", str(source), "--reference", f"{work}/nowhere.csv"], 1),
        lambda: (["tasks", "m.py:make", "--tune", pick("0", "-1", "many"), "--db", f"{work}/db"], 2),
        lambda: (["tasks", "m.py:make", "--tune", "1"], 2),
        lambda: (["tasks", "m.py:make", "--tracker", "h:1", "--key", "k"], 2),
        lambda: (["tasks", str(source), "--target", "bogus"], 2),
        lambda: (["legacy"], 2),
        lambda: (["legacy", "--report", f"{work}/nowhere.txt"], 1),
        lambda: (["demo", "--model", "nope"], 2),
        lambda: ([], 2),
        lambda: ([pick("--bogus", "bogus", "-x")], 2),
    ]
    for _ in range(count):
        argv, expected = rng.choice(cases)()
        before = sorted(p.name for p in work.iterdir())
        code, _, err = run_cli(argv)
        problem = broken_promise(code, err)
        if problem is None and code != expected:
            problem = f"exit {code}, not {expected}: {err.strip()[-200:]}"
        if problem is None and "] building" in err:
            problem = "refused only after the build started"
        if problem is None and sorted(p.name for p in work.iterdir()) != before:
            problem = "wrote something"
        yield " ".join(argv), problem


def serving_cases(work: Path, model: str, seed: int, count: int):
    """``profile``, ``bundle`` and ``estimate`` of an LLM ``model`` (a factory of an
    MLC-style Llama) with serving options drawn from bad, huge and small values; yields
    (what, broken promise or None). Kept: exit 0, 1 or 2 with a one-line error, no
    output directory left by a failure, and no run past the bounds (a context the cache
    or the machine cannot hold is refused, not run)."""
    rng = random.Random(seed)

    def pick(*values):
        return rng.choice(values)

    for i in range(count):
        out = work / f"served{i}"
        command = pick("profile", "bundle", "estimate")
        argv = [command, model, "--entry", pick("decode", "prefill", "embed", "nope")]
        for option, values in (
            ("--context", ("-1", "0", "x", "3.5", "", "8", "2147483648", "60000000", "99999999999999999999")),
            ("--tokens", ("-1", "0", "4", "1e3", "2147483647", "x")),
            ("--batch", ("0", "2", "-4", "x")),
            ("--bind", ("x=1", "vocab_size=0", "=3", "vocab_size=-1", "nope")),
        ):
            if rng.random() < 0.4:
                argv += [option, pick(*values)]
        argv += ["--out", out] if command != "estimate" else ["--device", "nvidia-a100-sxm4-80gb"]
        if command == "profile":
            argv += ["--repeat", "1"]
        code, _, err = run_cli(argv)
        problem = broken_promise(code, err)
        if problem is None and code and out.exists():
            problem = "a failed command left its output directory"
        yield " ".join(map(str, argv[:1] + argv[2:])), problem
        shutil.rmtree(out, ignore_errors=True)


# -- names as data ----------------------------------------------------------------

_PIECES = (
    "<",
    ">",
    "&",
    '"',
    "'",
    "\\",
    "{",
    "}",
    "|",
    "=",
    "+",
    "-",
    "@",
    "\t",
    "\r",
    "\n",
    "\x00",
    "\x07",
    "\x1b[31m",
    "\x1b]0;t\x07",
    "\x7f",
    "\x85",
    "\u202e",
    "\u2028",
    "\ufffe",
    "\ud800",
    "<!--",
    "</script>",
    "<img src=x onerror=alert(1)>",
    "__proto__",
    "constructor",
    "é",
    "🔥",
    "a",
    "layer",
    " ",
    "0",
    "1.5",
)


def hostile_name(rng: random.Random) -> str:
    """A name of up to six random pieces of markup, formulas, control and format
    characters, JS object keys and ordinary text."""
    return "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 6)))


def name_cases(seed: int, count: int):
    """Random hostile names through every text output's escaping, each promise
    checked: the terminal gets no control or format character; a CSV cell read back
    is the name and no cell starts as a formula; a graphviz label and its SVG (one dot
    run for all) hold no character XML forbids and parse; the HTML report's inlined
    data has no ``<``, ``>`` or ``&`` and reads back as the name."""
    import csv
    import xml.etree.ElementTree as ET

    import graphviz

    from relaytrace.render.html import script_json
    from relaytrace.render.safe_text import csv_cell, csv_value, dot_text, terminal

    rng = random.Random(seed)
    names = [hostile_name(rng) for _ in range(count)]
    graph = graphviz.Digraph("fuzz")
    for i, name in enumerate(names):
        graph.node(f"n{i}", label=dot_text(name), tooltip=dot_text(name))
    try:
        svg = ET.fromstring(graph.pipe(format="svg"))
        drawn = " | ".join(
            " ".join("".join(t.itertext()).split()) for t in svg.iter("{http://www.w3.org/2000/svg}text")
        )
        svg_problem = None
    except ET.ParseError as exc:
        drawn, svg_problem = set(), f"layers.svg is not XML: {exc}"
    for name in names:
        problem = svg_problem
        shown = terminal(name)
        if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u202e\u2028" for c in shown):
            problem = f"a control character reaches the terminal: {shown!r}"
        out = io.StringIO()
        csv.writer(out).writerow([csv_cell(name)])
        (cell,) = next(csv.reader(io.StringIO(out.getvalue())))
        if problem is None and (
            cell.startswith(("=", "+", "-", "@", "\t", "\r")) and cell != name or csv_value(cell) != name
        ):
            problem = f"CSV cell {cell!r} for {name!r}"
        if problem is None and " ".join(shown.split()) not in drawn:  # dot collapses white space
            problem = f"the SVG does not show {shown!r}"
        data = script_json({"layer": name})
        if problem is None and (any(c in data for c in "<>&") or json.loads(data)["layer"] != name):
            problem = f"inlined data {data!r}"
        yield repr(name), problem


# -- output directories --------------------------------------------------------------


def layout_cases(work: Path, seed: int, count: int):
    """Random output directory layouts (relaytrace's files, the user's files, a
    directory or link named like an output, rendered- names, nested trees) given to
    ``--out DIR --force``: either refused with one line before anything is written, or
    replaced — and never a file of the user's lost or changed."""
    import os

    from relaytrace.errors import RelaytraceError
    from relaytrace.jobs import RENDERED_OUTPUTS, _staged, prepare_out_dir
    from relaytrace.render.outputs import NAMES as OUTPUTS

    rng = random.Random(seed)
    ours = sorted(OUTPUTS) + sorted(RENDERED_OUTPUTS)
    for case in range(count):
        root = work / f"layout{case}"
        out = root / "d"
        out.mkdir(parents=True)
        user: dict[Path, str] = {}
        for _ in range(rng.randint(0, 4)):
            name = rng.choice(ours)
            if rng.random() < 0.2:  # a directory or a link named like an output: the user's
                if rng.random() < 0.5 and not (out / name).is_file():
                    (out / name).mkdir(exist_ok=True)
                    user[out / name / "thesis.txt"] = "the user's"
                    (out / name / "thesis.txt").write_text("the user's")
                elif not (out / name).exists():
                    (root / "precious.txt").write_text("the user's")
                    user[root / "precious.txt"] = "the user's"
                    os.symlink(root / "precious.txt", out / name)
            elif not (out / name).exists():
                (out / name).write_text("ours")
        if rng.random() < 0.3:
            name = rng.choice(("notes.txt", "rendered-data", "rendered-notes.txt", ".hidden"))
            user[out / name] = "the user's"
            (out / name).write_text("the user's")
        try:
            prepare_out_dir(out, force=True)
            _staged(out, lambda staging: (staging / "lineage.json").write_text("new"), overwrite=True)
            problem = None if (out / "lineage.json").read_text() == "new" else "not replaced"
        except (RelaytraceError, FileExistsError) as exc:
            problem = None if "\n" not in str(exc) else f"a many-line error: {exc}"
        lost = [str(p) for p, text in user.items() if not p.is_file() or p.read_text() != text]
        left = [p.name for p in root.iterdir() if p.name.startswith(".d.")]
        yield (
            str(sorted(p.name for p in out.iterdir()) if out.is_dir() else "gone"),
            f"user files lost: {lost}" if lost else f"left behind: {left}" if left else problem,
        )


# A whole CLI run in a child process that sends itself SIGNAL at its STEP-th write
# under ROOT (a file opened for writing, a rename, a removal), found by an audit hook.
_SIGNALLED_RUN = r"""
import os, signal, sys
root, step, sig, argv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
count = [0]
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT
def hook(event, args):
    if event == "open":
        path, mode, flags = args
        writing = set(mode or "") & set("wax+") if mode else bool((flags or 0) & WRITES)
    elif event in ("os.rename", "os.replace", "os.remove", "os.rmdir", "shutil.rmtree"):
        path, writing = args[0], True
    else:
        return
    if writing and isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(root):
        count[0] += 1
        if count[0] == step:
            os.kill(os.getpid(), sig)
sys.addaudithook(hook)
from relaytrace.cli import main
sys.exit(main(argv))
"""


def signal_cases(work: Path, model: str, signals=("SIGKILL", "SIGINT", "SIGTERM"), limit: int = 40):
    """A whole ``profile --out DIR --force`` run over DIR's previous outputs, signalled
    at each of its writes in turn (every output file, the swap's renames), per signal:
    ``DIR`` is then its old outputs, its new ones, or gone with the old ones named by
    the next run; a Ctrl-C ends with code 130 and one line; a file of the user's beside
    or inside is never touched; the next ``--force`` run, once leftovers are old,
    succeeds and leaves nothing beside. Yields (case, problem or None)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    source = work / "signal-source"
    code, _, err = run_cli(["--quiet", "profile", model, "--repeat", "1", "--out", source])
    if code:
        yield "source", f"could not make the source directory: {err[-300:]}"
        return
    old = sorted(p.name for p in source.iterdir())
    for name in signals:
        for step in range(1, limit + 1):
            root = work / f"signal-{name}-{step}"
            out = root / "d"
            shutil.copytree(source, out)
            (root / "mine.txt").write_text("the user's")
            run = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _SIGNALLED_RUN,
                    str(root),
                    str(step),
                    str(int(getattr(signal, name))),
                    "--quiet",
                    "profile",
                    model,
                    "--repeat",
                    "1",
                    "--out",
                    str(out),
                    "--force",
                ],
                capture_output=True,
                text=True,
            )
            finished = run.returncode == 0
            problem = None
            if name == "SIGINT" and not finished:
                if run.returncode != 130 or "Traceback" in run.stderr:
                    problem = f"Ctrl-C ended with {run.returncode}: {run.stderr[-300:]}"
            elif not finished and run.returncode != -getattr(signal, name):
                problem = f"ended with {run.returncode}: {run.stderr[-300:]}"
            names = sorted(p.name for p in out.iterdir()) if out.is_dir() else None
            if names is not None and names != old and set(names) != set(old):
                problem = problem or f"out holds neither the old outputs nor the new: {names}"
            if (root / "mine.txt").read_text() != "the user's":
                problem = problem or "a user's file changed"
            for stale in root.glob(".*"):  # as if the signal came ten minutes ago
                os.utime(stale, (time.time() - 3600, time.time() - 3600))
            again = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "relaytrace.cli",
                    "--quiet",
                    "profile",
                    model,
                    "--repeat",
                    "1",
                    "--out",
                    str(out),
                    "--force",
                ],
                capture_output=True,
                text=True,
            )
            if again.returncode == 1 and "left its previous outputs in" in again.stderr:
                (aside,) = root.glob(".d.old-*")  # named: the user puts them back, and runs again
                os.rename(aside / "d", out)
                shutil.rmtree(aside)
                again = subprocess.run(again.args, capture_output=True, text=True)
            if again.returncode:
                problem = problem or f"the next run failed: {again.stderr[-300:]}"
            left = sorted(p.name for p in root.iterdir() if p.name not in ("d", "mine.txt"))
            if left:
                problem = problem or f"left beside: {left}"
            yield f"{name} at write {step}", problem
            shutil.rmtree(root)
            if finished:
                break  # the run ended before this write: every write was tried


def _remote_run(port: int, model: str, out: Path, *extra: str):
    """``relaytrace profile MODEL --rpc 127.0.0.1:PORT --out OUT`` in a child process."""
    import os
    import subprocess
    import sys

    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relaytrace.cli",
            "profile",
            model,
            "--rpc",
            f"127.0.0.1:{port}",
            "--out",
            str(out),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore", PYTHONFAULTHANDLER="1"),
    )


def _read_until(proc, text: str) -> str:
    """The child's stderr up to and including the first line holding TEXT (all of it if none does)."""
    seen = ""
    while text not in seen:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
    return seen


def remote_steps(model: str) -> list[str]:
    """The progress lines of a healthy remote ``profile`` of MODEL from the RPC check on:
    the steps a stopped server is tried at."""
    import tempfile

    from tvm.rpc import server

    board = server.Server(host="127.0.0.1", port=10200, port_end=10290, silent=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            proc = _remote_run(board.port, model, Path(tmp) / "d")
            _, err = proc.communicate(timeout=600)
    finally:
        board.terminate()
    lines = [line.removeprefix("[relaytrace] ") for line in err.splitlines() if line.startswith("[relaytrace] ")]
    start = next(i for i, line in enumerate(lines) if line.startswith("checking rpc"))
    # each line up to the address it names (the cases' server listens on a port of its own)
    return [
        line.split(":")[0] if line.startswith("remote isolated") else line.split(" 127.0.0.1:")[0]
        for line in lines[start:]
    ]


def stopped_server_cases(work: Path, model: str, steps=None, delays=(0.0, 0.3), limit_s: float = 45.0):
    """A remote ``profile`` whose server is stopped (SIGSTOP: it holds its sockets and never
    answers) at each of its steps (default: every progress line of a healthy run, each
    site's), right as the step begins and DELAYS seconds into it: the run ends within
    LIMIT_S (the 30 s step limit and --kernel-timeout 4, plus start-up) with code 1 and one
    line naming the device and what it was doing — or, stopped after the last figure was
    in, with code 0 and its outputs; the directory exists only then. (Code 0 is also
    what a stop that came too late gives: TVM's server forks a process per session, and
    one forked after the stop runs on; that is a miss of the harness, not a promise.) Then a second run
    waiting on the stopped server is interrupted (Ctrl-C): code 130 within 15 s, no
    directory. Yields (case, problem or None)."""
    import os
    import signal
    import subprocess
    import tempfile
    import time

    import psutil
    from tvm.rpc import server

    mine = psutil.Process()
    hangs: list[Path] = []
    for step in steps or remote_steps(model):
        for delay in delays:
            case = f"stopped at {step!r} +{delay:.1f} s"
            board = server.Server(host="127.0.0.1", port=10300, port_end=10390, silent=True)
            out, waiting = work / "stopped-d", work / "stopped-e"
            problem = None
            try:
                proc = _remote_run(board.port, model, out, "--kernel-timeout", "4")
                seen = _read_until(proc, step)
                time.sleep(delay)
                for p in mine.children(recursive=True):  # the server's processes, not the run's
                    try:
                        if p.pid != proc.pid and proc.pid not in (q.pid for q in p.parents()):
                            p.suspend()
                    except psutil.NoSuchProcess:  # one of the run's own, short-lived (a linker)
                        pass
                start = time.time()
                try:
                    _, err = proc.communicate(timeout=limit_s * 2)
                except subprocess.TimeoutExpired:  # every thread's stack to a file, for the report
                    proc.send_signal(signal.SIGABRT)
                    _, err = proc.communicate()
                    dump = Path(tempfile.gettempdir()) / f"relaytrace-hang-{os.getpid()}-{len(hangs)}.txt"
                    dump.write_text(err)
                    hangs.append(dump)
                    err += f"\n(hung: its threads' stacks are in {dump})"
                took = time.time() - start
                err = seen + err
                last = (err.strip().splitlines() or [""])[-1]
                if took > limit_s:
                    problem = f"ended {took:.0f} s after the stop (limit {limit_s:.0f} s): {last[:200]}"
                elif proc.returncode not in (0, 1) or broken_promise(proc.returncode, err):
                    problem = broken_promise(proc.returncode, err) or f"exit code {proc.returncode}"
                elif proc.returncode == 1 and not (
                    f"127.0.0.1:{board.port}" in last
                    and any(said in last for said in ("stopped answering while", "did not finish", "answered at"))
                ):
                    problem = f"the error does not name the device and the step: {last[:200]}"
                elif out.exists() != (proc.returncode == 0):
                    problem = f"exit {proc.returncode} but the output directory exists: {out.exists()}"
                second = _remote_run(board.port, model, waiting, "--kernel-timeout", "60")
                _read_until(second, "checking rpc")
                time.sleep(2.0)  # waiting on the stopped server now
                second.send_signal(signal.SIGINT)
                start = time.time()
                try:
                    _, err = second.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    second.kill()
                    _, err = second.communicate()
                if problem is None and (second.returncode != 130 or time.time() - start > 15 or waiting.exists()):
                    problem = (
                        f"Ctrl-C while waiting ended with {second.returncode} after "
                        f"{time.time() - start:.0f} s: {err[-200:]}"
                    )
            finally:
                for p in mine.children(recursive=True):
                    try:
                        p.resume()
                    except psutil.Error:
                        pass
                board.terminate()
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(waiting, ignore_errors=True)
            yield case, problem
