"""The repository itself: what a user of the checkout sees."""

from __future__ import annotations

from pathlib import Path

from ncclsim.nccl import wheels
from ncclsim.rundir import DEFAULT_BASE
from ncclsim.sweep.cli import DEFAULT_OUT

REPO = Path(__file__).resolve().parents[1]


def test_gitignore_ignores_what_runs_write_in_the_checkout() -> None:
    ignored = (REPO / ".gitignore").read_text().split()
    for base in (DEFAULT_BASE, DEFAULT_OUT):
        assert f"/{base}/" in ignored, f"{base}/ (written by ncclsim in the working directory) is not ignored"


def test_readme_says_what_proves_results_under_nccl_tests() -> None:
    """nccl-tests' #wrong column comes from kernels the simulated GPU does not run."""
    text = " ".join((REPO / "README.md").read_text().split())
    assert "#wrong" in text
    at = text.index("#wrong")
    near = text[max(0, at - 600):at + 600]
    assert "always 0" in near and "ncclsim.probe" in near and "nccl_perf" in near, near


def test_the_default_nccl_is_one_release() -> None:
    """ncclsim depends on no NCCL (it would replace PyTorch's); its extras install the
    release it fetches where an environment has none."""
    import tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("nvidia-nccl")]
    pinned = f"nvidia-nccl-cu12=={wheels.DEFAULT_RELEASE}"
    assert pinned in project["optional-dependencies"]["nccl"]
    assert pinned in project["optional-dependencies"]["test"]


def test_ci_runs_the_readmes_test_command() -> None:
    """The README's second set-up command is what CI runs, and between its
    pytest runs every test is selected: the quick set and the end-to-end runs."""
    blocks = (REPO / "README.md").read_text().split("```sh\n")
    command = blocks[2].split("\n```")[0].strip()
    assert (REPO / ".ci" / "run").read_text().strip().splitlines()[-1] == command
    selections = [part.split("-m ", 1)[1].split(" -n")[0] for part in command.split(" && ") if "pytest" in part]
    assert selections == ['"not e2e"', "e2e"], selections
