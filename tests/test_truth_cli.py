"""The ground-truth harness refuses a folder it cannot write before it runs a scenario:
a run takes minutes, and its matrix must not be lost at the end, nor a traceback shown."""

from __future__ import annotations

import pytest

from benchmarks.truth.__main__ import main


@pytest.mark.parametrize("option", ["--keep", "--out"])
def test_an_unusable_folder_is_one_message_and_exit_2(option, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as stop:
        main(["--scenarios", "client-per-message", option, str(blocker / "below")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err

