"""termnorm.settings: environment over termnorm.toml over defaults, run-time data in the data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from termnorm import settings

REPO = Path(__file__).resolve().parents[1]


def test_environment_over_file_over_defaults(tmp_path, monkeypatch):
    conf = tmp_path / "site.toml"
    conf.write_text('session_hours = 3\nauth = "off"\ndata_dir = "%s"\n' % (tmp_path / "from-file"), encoding="utf-8")
    monkeypatch.setenv("TERMNORM_CONFIG", str(conf))
    monkeypatch.delenv("TERMNORM_DATA_DIR")
    s = settings.get()
    assert (s.session_hours, s.auth, s.data_dir, s.config_file) == (3.0, False, tmp_path / "from-file", str(conf))
    assert s.models_dir == tmp_path / "from-file" / "models" and s.jobs_dir == tmp_path / "from-file" / "jobs"
    assert s.fit_threads == 1 and s.bcrypt_rounds == 12  # defaults
    monkeypatch.setenv("TERMNORM_SESSION_HOURS", "8")  # a new environment is read again
    assert settings.get().session_hours == 8.0


def test_local_termnorm_toml_is_read_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "termnorm.toml").write_text('db_url = "sqlite:////srv/termnorm/db.sqlite3"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert settings.get().db_url == "sqlite:////srv/termnorm/db.sqlite3"


@pytest.mark.parametrize("text, words", [("session_hours = [1", "not valid TOML"),
                                         ("colour = 'blue'", "unknown settings colour"),
                                         ("session_hours = 'soon'", "session_hours .*expected a number"),
                                         ("bcrypt_rounds = 99", "bcrypt_rounds .*outside 4..31"),
                                         ("auth = 'maybe'", "auth .*expected on or off"),
                                         ("min_dwell_s = -1", "min_dwell_s .*outside")])
def test_a_bad_file_is_named_with_its_problem(tmp_path, monkeypatch, text, words):
    monkeypatch.delenv("TERMNORM_MIN_DWELL_S")  # conftest sets it; here the file must speak
    conf = tmp_path / "bad.toml"
    conf.write_text(text, encoding="utf-8")
    monkeypatch.setenv("TERMNORM_CONFIG", str(conf))
    with pytest.raises(ValueError, match=words) as e:
        settings.get()
    assert str(conf) in str(e.value)


def test_default_database_is_in_the_data_directory(tmp_path, monkeypatch):
    from db import services

    monkeypatch.setenv("TERMNORM_DATA_DIR", str(tmp_path / "d"))
    url = services.database_url()
    assert url == f"sqlite:///{tmp_path / 'd' / 'termnorm.sqlite3'}" and (tmp_path / "d").is_dir()
    services.init_db(url)
    assert (tmp_path / "d" / "termnorm.sqlite3").is_file()
    services.dispose(url)
    assert str(REPO) not in url


def test_the_readme_table_is_the_settings_table():
    assert settings.table() in (REPO / "README.md").read_text(encoding="utf-8")
    assert len(settings.FIELDS) == len([f for f in settings.Settings.__dataclass_fields__ if f != "config_file"])


def test_an_environment_variable_is_named_when_wrong(monkeypatch):
    monkeypatch.setenv("TERMNORM_SESSION_HOURS", "x")
    with pytest.raises(ValueError, match=r"session_hours \(\$TERMNORM_SESSION_HOURS\): expected a number"):
        settings.get()


def test_relative_paths_in_the_file_are_relative_to_the_file(tmp_path, monkeypatch):
    conf = tmp_path / "etc" / "termnorm.toml"
    conf.parent.mkdir()
    conf.write_text('data_dir = "data"\n', encoding="utf-8")
    monkeypatch.setenv("TERMNORM_CONFIG", str(conf))
    monkeypatch.delenv("TERMNORM_DATA_DIR")
    monkeypatch.chdir("/")
    assert settings.get().data_dir == tmp_path / "etc" / "data"
