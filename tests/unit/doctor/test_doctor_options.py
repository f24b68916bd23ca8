"""The doctor subcommand's arguments, through the CLI's own parser: no token needed, bad values refused."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.cli import make_parser
from jupyterhub_gpu.doctor import options


def test_the_defaults_are_the_hubs_own_file_and_ten_seconds():
    args = make_parser().parse_args(["doctor"])
    assert (args.hub_config, args.service_config, args.json, args.send_test, args.timeout) == (
        "jupyterhub_config.py",
        None,
        False,
        False,
        10.0,
    )
    assert args.run is options.run  # no token: the doctor does not call the service


def test_paths_and_switches():
    args = make_parser().parse_args(
        ["doctor", "-f", "/etc/jupyterhub/jupyterhub_config.py", "--service-config", "gpu.py", "--json", "--send-test"]
    )
    assert (args.hub_config, args.service_config, args.json, args.send_test) == (
        "/etc/jupyterhub/jupyterhub_config.py",
        "gpu.py",
        True,
        True,
    )


@pytest.mark.parametrize("value", ["-3", "0", "abc", "nan", "inf", "301"])
def test_a_bad_timeout_is_refused_naming_the_option(value, capsys):
    with pytest.raises(SystemExit) as exit:
        make_parser().parse_args(["doctor", "--timeout", value])
    assert exit.value.code == 2
    assert f"argument --timeout: must be a number of seconds from 0 to 300, such as 10, got {value!r}" in (
        capsys.readouterr().err
    )
