# SPDX-License-Identifier: BSD-3-Clause
"""Bad input that used to be accepted or mishandled (issue 21, section 3), run as a user runs it
(the real `fabscope` process): each is exit 2, names what was given (quoted, a newline visible, a
long value cut), says what would be right, and never prints a traceback."""

from __future__ import annotations

import shutil

import pytest

from conftest import fabscope


def usage_error(out: object, *wanted: str) -> str:
    rc, err = out.returncode, out.stderr  # type: ignore[attr-defined]
    assert rc == 2, (rc, err)
    assert "Traceback" not in err, err
    for text in wanted:
        assert text in err, (text, err)
    return str(err)


@pytest.mark.parametrize(
    ("args", "wanted"),
    [
        (["run", "--loopback", "--device", ""], ["--device", "empty value"]),
        (["run", "--loopback", "--bind", ""], ["--bind", "empty value"]),
        (["run", "--loopback", "--provider", "", "--backend", "ofi"], ["--provider", "empty value"]),
        (["serve", "--device", ""], ["--device", "empty value"]),
        (["serve", "--log", ""], ["--log", "empty"]),
        (["serve", "--bind", ""], ["--bind", "empty"]),
    ],
)
def test_an_empty_value_is_refused_not_taken_as_absent(args: list[str], wanted: list[str]) -> None:
    usage_error(fabscope(*args, timeout=60), *wanted)


def test_a_value_with_a_newline_is_quoted_whole() -> None:
    err = usage_error(fabscope("run", "--loopback", "--device", "lo\n", timeout=60), "--device 'lo\\n'",
                      "no such network device", "it has: lo")
    assert err.count("\n") == 1, err  # one line: the newline is shown, not printed


def test_a_port_of_fullwidth_digits_is_refused() -> None:
    usage_error(fabscope("run", "--peer", "127.0.0.1:\uff12\uff18\uff12\uff15\uff10", timeout=60), "--peer",
                "HOST:PORT")


def test_serve_log_path_too_long_for_the_file_system() -> None:
    usage_error(fabscope("serve", "--log", "/tmp/" + "a" * 300, timeout=60), "--log", "File name too long",
                "(305 characters)")


def test_a_long_key_file_value_is_cut_in_the_message() -> None:
    out = fabscope("run", "--peer", "127.0.0.1", "--key-file", "k" * 100_000, timeout=60)
    err = usage_error(out, "--key-file", "(100000 characters)")
    assert len(err) < 600, len(err)


def test_fi_provider_that_leaves_no_provider_is_named() -> None:
    from fabscope.launch.engine import backends

    if "ofi" not in backends():
        pytest.skip("the ofi backend is not built here")
    for extra in ([], ["--provider", "tcp"]):
        out = fabscope("run", "--loopback", "--backend", "ofi", *extra, timeout=60, env={"FI_PROVIDER": "garbage"})
        usage_error(out, "FI_PROVIDER='garbage'", "Unset FI_PROVIDER")


@pytest.mark.skipif(shutil.which("ompi_info") is None, reason="Open MPI's ompi_info is not installed")
def test_an_unknown_mca_parameter_is_refused_with_the_closest_names() -> None:
    out = fabscope("run", "--loopback", "--backend", "mpi", "--mca", "btl_tcp_if_inclde=lo", timeout=60)
    usage_error(out, "--mca 'btl_tcp_if_inclde'", "no such parameter", "closest: btl_tcp_if_include")
    # The same check in-process for the other spellings (one subprocess is enough for the CLI path).
    from fabscope.errors import FabscopeError
    from fabscope.launch.mpi_params import check_names

    with pytest.raises(FabscopeError, match=r"--env 'btl_tcp_if_inclde'.*closest: btl_tcp_if_include"):
        check_names("openmpi", [], ["OMPI_MCA_btl_tcp_if_inclde"])
    with pytest.raises(FabscopeError, match="--mca 'nosuch_param': the MPI library here has no such parameter"):
        check_names("openmpi", ["nosuch_param"], [])


@pytest.mark.skipif(shutil.which("mpivars") is None, reason="MPICH's mpivars is not installed")
def test_an_unknown_mpich_control_variable_is_refused() -> None:
    out = fabscope("run", "--loopback", "--backend", "mpi", "--mpi", "mpich", "--env", "MPIR_CVAR_CH4_NETMD=ofi",
                   timeout=60)
    usage_error(out, "'MPIR_CVAR_CH4_NETMD'", "closest: MPIR_CVAR_CH4_NETMOD")


@pytest.mark.skipif(shutil.which("ompi_info") is None, reason="Open MPI's ompi_info is not installed")
def test_known_open_mpi_parameters_pass() -> None:
    """Names Open MPI has are let through: a check that refused them would refuse real runs."""
    from fabscope.launch.mpi_params import check_names, openmpi_names

    names = ["btl_tcp_if_include", "pml", "plm_rsh_agent", "btl"]
    assert set(names) <= openmpi_names(), sorted(set(names) - openmpi_names())  # what ompi_info lists here
    check_names("openmpi", names[:3], ["OMPI_MCA_btl"])  # raises FabscopeError on a name it refuses


@pytest.mark.skipif(shutil.which("mpivars") is None, reason="MPICH's mpivars is not installed")
def test_known_mpich_control_variables_pass() -> None:
    """MPICH's own control variables are let through, and variables that are not MPIR_CVAR_* (UCX's)
    are not MPICH's to check."""
    from fabscope.launch.mpi_params import check_names, mpich_cvars

    assert "MPIR_CVAR_CH4_NETMOD" in mpich_cvars() and "UCX_TLS" not in mpich_cvars()
    check_names("mpich", [], ["MPIR_CVAR_CH4_NETMOD", "UCX_TLS"])  # raises FabscopeError on a name it refuses


@pytest.mark.parametrize(
    ("args", "given", "meant"),
    [
        (["suite", "--backend", "tcp", "--quick", "--no-store"], "--backend", "--backends"),  # suite's is plural
        (["run", "--loopback", "--size", "8"], "--size", "--sizes"),
        (["baseline", "save", "golden", "--ta", "x"], "--ta", "--tag"),
    ],
)
def test_an_abbreviated_option_is_refused_naming_the_whole_one(args: list[str], given: str, meant: str) -> None:
    """argparse takes a prefix of an option as the option: `suite --backend tcp` ran as `--backends
    tcp` without a word (found by a scenario check that named `backend`). Each is refused, nothing
    runs, and the message names the option meant."""
    err = usage_error(fabscope(*args), f"'{given}'", "abbreviations are not taken", f"did you mean {meant}?")
    assert "suite:" not in err and "measured" not in err, err
