"""Issue 18, case 4: every git command rebaser runs behaves the same whatever the user's git
configuration says. A hostile configuration (every setting below changes what some git
command rebaser runs would do) given as the global, the system or the repository's config
must give the same series, branches, stops and records as no configuration at all."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from synthetic import SyntheticUpstream, commit_verbatim, git
from test_fast_lane import fork_and_tip

from rebaser.errors import ExitCode

# Settings that would change a result, each with what it would do.
HOSTILE = """\
[commit]
\tcleanup = strip              # '#' lines gone from messages
\tgpgSign = true               # commits fail without a key
\ttemplate = {root}/template
\tverbose = true
[core]
\tcommentChar = %
\tautocrlf = true              # CRLF in files and blobs
\teol = crlf
\tsafecrlf = true
\twhitespace = trailing-space,space-before-tab,indent-with-non-tab,cr-at-eol
\tquotePath = false
\tbigFileThreshold = 100       # every file "binary" in diffs
\tattributesFile = {root}/attributes
\thooksPath = {root}/hooks     # hooks that fail
\tfsmonitor = {root}/hooks/fsmonitor
\tabbrev = 5
\tpager = false
\teditor = false
\tsparseCheckout = true
\tsparseCheckoutCone = true
\tsplitIndex = true
\tuntrackedCache = true
\tlogAllRefUpdates = always
[format]
\tcoverLetter = true           # every subject *** SUBJECT HERE ***
\tattach = boundary
\tto = someone@example.com
\tcc = other@example.com
\theaders = "X-Leak: yes"
\tsignOff = true
\tsignature = leaked signature
\tnumbered = true
\tthread = deep
\tuseAutoBase = true
\tnotes = true
\tfrom = Leaky <leaky@example.com>
\tforceInBodyFrom = true
\tencodeEmailHeaders = false
\tmboxrd = true
\tsubjectPrefix = LEAK
\tpretty = oneline
[diff]
\tnoprefix = true
\tmnemonicPrefix = true
\trenames = copies
\talgorithm = patience
\tcontext = 9
\tinterHunkContext = 9
\tindentHeuristic = false
\tsuppressBlankEmpty = true
\trelative = true
\torderFile = {root}/order
\texternal = {root}/hooks/external-diff
\tsubmodule = log
\tcolorMoved = zebra
\tstatGraphWidth = 5
[diff "evil"]
\ttextconv = sed s/a/EVIL/
[filter "evil"]
\tclean = sed s/a/EVIL/
\tsmudge = sed s/a/EVIL/
[merge "evil"]
\tdriver = false
[color]
\tui = always
\tdiff = always
\tstatus = always
\tbranch = always
\tdecorate = always
\tadvice = always
[apply]
\twhitespace = fix
\tignoreWhitespace = change
[merge]
\tconflictStyle = diff3
\trenormalize = true
\trenames = false
\tdirectoryRenames = false
\trenameLimit = 1
\tff = only
\tverifySignatures = true
\tautoStash = true
[rerere]
\tenabled = true
\tautoUpdate = true
[rebase]
\tautoSquash = true
\tautoStash = true
\tupdateRefs = true
\tmissingCommitsCheck = error
\tinstructionFormat = %s
\tabbreviateCommands = true
\tforkPoint = true
\tstat = true
\trebaseMerges = true
[cherry-pick]
[sequence]
\teditor = false
[log]
\tshowSignature = true
\tdecorate = full
\tmailmap = true
\tdate = relative
\tabbrevCommit = true
\tshowRoot = false
\tfollow = true
[mailmap]
\tfile = {root}/mailmap
[i18n]
\tcommitEncoding = ISO-8859-1
\tlogOutputEncoding = ISO-8859-1
[status]
\tshowUntrackedFiles = no
\trenames = copies
[notes]
\tdisplayRef = refs/notes/*
[submodule]
\trecurse = true
[index]
\tversion = 4
\tsparse = true
[feature]
\tmanyFiles = true
\texperimental = true
[gc]
\tauto = 1
\tautoDetach = false
[maintenance]
\tauto = true
[am]
\tthreeWay = true
\tmessageId = true
[user]
\tuseConfigOnly = true
[init]
\ttemplateDir = {root}/template-dir
\tdefaultBranch = trunk
[add]
\tignoreErrors = true
[clean]
\trequireForce = true
[advice]
\tdetachedHead = true
[transfer]
\tfsckObjects = true
[fetch]
\tprune = true
\trecurseSubmodules = yes
\twriteCommitGraph = true
[worktree]
\tguessRemote = true
[branch]
\tautoSetupMerge = always
\tsort = -committerdate
[checkout]
\tworkers = 4
[grep]
\tpatternType = perl
\tlineNumber = true            # a line number in every match
\tcolumn = true
[pretty]
\tfull = format:LEAK %s
[tag]
\tgpgSign = true
\tsort = -version:refname
[trailer]
\tifexists = replace
[range-diff]
[pull]
\trebase = true
"""


def write_hostile_config(root: Path) -> Path:
    """The hostile configuration and the files it names, in `root`."""
    root.mkdir()
    hooks = root / "hooks"
    hooks.mkdir()
    for hook in [
        "pre-commit",
        "commit-msg",
        "post-commit",
        "prepare-commit-msg",
        "post-rewrite",
        "post-checkout",
        "reference-transaction",
        "pre-rebase",
        "fsmonitor",
    ]:
        (hooks / hook).write_text("#!/bin/sh\necho hook >&2\nexit 1\n")
        (hooks / hook).chmod(0o755)
    (hooks / "external-diff").write_text("#!/bin/sh\necho EXTERNAL DIFF\n")
    (hooks / "external-diff").chmod(0o755)
    (root / "template").write_text("LEAKED TEMPLATE\n")
    (root / "attributes").write_text("* text eol=crlf\n*.py filter=evil diff=evil merge=evil\n")
    (root / "order").write_text("pkg/util.py\n*\n")
    (root / "mailmap").write_text(
        "Leaked Name <leak@example.com> <test@example.com>\n"
        "Leaked Name <leak@example.com> <t@t>\n"
    )
    (root / "template-dir" / "hooks").mkdir(parents=True)
    config = root / "gitconfig"
    text = "".join(line.split("  #")[0].rstrip() + "\n" for line in HOSTILE.splitlines())
    config.write_text(text.format(root=root))
    return config


def fork_with_comments(upstream: SyntheticUpstream, root: Path) -> None:
    """fork_and_tip's fork, plus a commit whose message has '#' lines and odd spacing."""
    fork_and_tip(upstream, root)
    git(upstream.path, "checkout", "-q", "fork")
    (upstream.path / "pkg" / "notes.py").write_text("NOTE = 1\n")
    git(upstream.path, "add", "--all")
    message = "notes: a module  with  spaces\n\n# not a comment\n  indented\n\n\n#end\n"
    commit_verbatim(upstream.path, message, author="Test Author <test@example.com>")
    git(upstream.path, "checkout", "-q", "main")


def run_everything(rebaser, root: Path, repo: Path) -> dict:
    """import, apply through the lane and without it, a stop fixed and continued (its
    resolution recorded), refresh: every byte and commit that came out."""
    seen: dict = {}
    series_dir = root / "series"
    result = rebaser("import", "--repo", repo, "--range", "base..fork", "--series-dir", series_dir)
    assert result.code == ExitCode.OK, result.out + result.err
    series = series_dir / "series"
    seen["imported"] = {p.name: p.read_bytes() for p in sorted(series_dir.iterdir())}
    base = ["apply", "--series", series, "--repo", repo, "--base", "tip", "--test", "none"]
    for lane in ([], ["--no-fast-lane"]):
        report = root / "report.json"
        result = rebaser(*base, "--keep-going", "--force", "--json", report, *lane)
        assert result.code == ExitCode.NOT_APPLIED, result.out + result.err
        data = json.loads(report.read_text())
        seen[f"keep-going {lane}"] = (
            [(s["name"], s["status"], s["detail"]) for s in data["steps"]],
            git(repo, "rev-parse", data["branch"]),
            git(repo, "log", "--format=%an <%ae> %ad%n%B", "--date=raw", "tip.." + data["branch"]),
        )
    stopped = rebaser(*base, "--force", "--json", root / "stop.json")
    assert stopped.code == ExitCode.NOT_APPLIED, stopped.out + stopped.err
    tree = Path(json.loads((root / "stop.json").read_text())["worktree"])
    calc = (tree / "pkg/calc.py").read_text()
    assert "<<<<<<<" in calc and not list(tree.rglob("*.rej")), calc  # a conflict stop
    start, end = calc.index("<<<<<<<"), calc.index(">>>>>>>")
    seen["conflict"] = calc
    (tree / "pkg/calc.py").write_text(
        calc[:start] + "    return a // b\n" + calc[calc.index("\n", end) + 1 :]
    )
    user_add = ["git", *USER_NEUTRAL, "add", "pkg/calc.py"]  # the user's step, not rebaser's
    subprocess.run(user_add, cwd=tree, check=True, env=_clean_env())
    done = rebaser("continue", "--repo", repo, "--json", root / "done.json")
    assert done.code == ExitCode.OK, done.out + done.err
    data = json.loads((root / "done.json").read_text())
    seen["continued"] = (
        [(s["name"], s["status"]) for s in data["steps"]],
        git(tree, "rev-parse", "HEAD"),
    )
    seen["records"] = {
        str(p.relative_to(series_dir)): p.read_bytes()
        for p in sorted((series_dir / "resolutions").rglob("*"))
        if p.is_file()
    }
    # the same conflict again: the series' record replays it (git's rerere must not)
    again = rebaser(*base, "--force", "--json", root / "again.json")
    assert again.code == ExitCode.OK, again.out + again.err
    data = json.loads((root / "again.json").read_text())
    seen["replayed"] = (
        [(s["name"], s["status"]) for s in data["steps"]],
        git(tree, "rev-parse", "HEAD"),
    )
    refreshed = rebaser("refresh", "--series", series, "--repo", tree)
    assert refreshed.code == ExitCode.OK, refreshed.out + refreshed.err
    seen["refreshed"] = {
        p.name: p.read_bytes() for p in sorted(series_dir.iterdir()) if p.is_file()
    }
    return seen


# The test's own `git add` (the user's fix) must stage the same bytes under any config.
USER_NEUTRAL = [
    part
    for setting in (
        "core.attributesFile=/dev/null",
        "core.autocrlf=false",
        "core.safecrlf=false",
        "core.fsmonitor=false",
        "core.hooksPath=/dev/null",
    )
    for part in ("-c", setting)
]


def _clean_env() -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_CONFIG")}
    return {**env, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.mark.parametrize("scope", ["global", "system", "repository"])
def test_a_hostile_git_config_changes_nothing(rebaser, tmp_path, upstream, monkeypatch, scope):
    fork_with_comments(upstream, tmp_path / "setup")
    twin = tmp_path / "twin"
    shutil.copytree(upstream.path, twin, symlinks=True)
    clean = run_everything(rebaser, tmp_path / "clean", upstream.path)

    config = write_hostile_config(tmp_path / "hostile-config")
    with monkeypatch.context() as env:
        if scope == "global":
            env.setenv("GIT_CONFIG_GLOBAL", str(config))
        elif scope == "system":
            env.setenv("GIT_CONFIG_SYSTEM", str(config))
            env.delenv("GIT_CONFIG_NOSYSTEM", raising=False)
        else:
            with (twin / ".git" / "config").open("a") as own:
                own.write(f"[include]\n\tpath = {config}\n")
        hostile = run_everything(rebaser, tmp_path / "hostile", twin)
    for key in clean:
        assert hostile[key] == clean[key], key
