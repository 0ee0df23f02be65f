"""A config file that is not valid YAML is a one-line usage error that says where: the file, the line
and the column, and what PyYAML found there."""

import pytest

from harness.__main__ import main
from harness.core.config import load_config
from harness.core.errors import ExitCode, UserError


@pytest.mark.parametrize(
    "text, where, found",
    [
        ("check:\n  trials: 1\n   extra: 2\n", "line 3, column 9", "mapping values are not allowed here"),
        (
            "check: {trials: 1\nseed: 2\n", "line 2, column 5",
            "expected ',' or '}', but got ':' (while parsing a flow mapping started at line 1, column 8)",
        ),
        (
            'name: "open\n', "line 2, column 1",
            "found unexpected end of stream (while scanning a quoted scalar started at line 1, column 7)",
        ),
        (
            "check:\n\ttrials: 1\n", "line 2, column 1",
            "found character '\\t' that cannot start any token (while scanning for the next token)",
        ),
    ],
)
def test_invalid_yaml_in_a_config_file_names_the_file_line_and_column(tmp_path, text, where, found):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        load_config(path)
    assert str(caught.value) == f"config file {path} is not valid YAML at {where}: {found}"


def test_the_command_line_prints_the_yaml_error_with_its_place_on_one_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("check:\n  trials: [1, 2\n")
    assert main(["--all", "--config", str(path)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"error: config file {path} is not valid YAML at line 3, column 1: ") and err.count("\n") == 1


def test_a_flag_over_a_malformed_setting_does_not_hide_it(capsys):
    """`--no-timing` sets timing.enabled itself; a bad value beneath it is still a usage error."""
    assert main(["--problem", "1_Scale", "--set", "timing.enabled=maybe", "--no-timing"]) == ExitCode.USAGE
    assert capsys.readouterr().err == "error: config key 'timing.enabled' must be true or false, got 'maybe'\n"


@pytest.mark.parametrize("value", ["seven", "1.5", "true"])
def test_a_check_seed_that_is_not_an_integer_is_a_one_line_error(tmp_path, value):
    path = tmp_path / "seed.yaml"
    path.write_text(f"check:\n  seed: {value}\n")
    with pytest.raises(UserError) as caught:
        load_config(path)
    assert str(caught.value).startswith("config key 'check.seed' must be an integer, got ")
