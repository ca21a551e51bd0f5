"""Settings: defaults, the YAML file, HOGWILD_* overrides, flags, and errors that name the key."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest
import yaml

from hogwild import config
from hogwild.config import Settings
from hogwild.errors import ConfigError
from hogwild.settings import load as settings_load

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return path


def test_top_level_settings_file_documents_every_key_with_the_defaults() -> None:
    text = (ROOT / "settings.yaml").read_text()
    loaded = yaml.safe_load(text)
    assert list(loaded) == list(config.KEYS)
    assert config.load(ROOT / "settings.yaml") == Settings()
    lines = text.splitlines()
    for key in config.KEYS:
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
        assert lines[index - 1].startswith("# "), f"{key} has no comment above it"


def test_defaults_are_valid_and_frozen() -> None:
    settings = config.load()
    assert settings == Settings()
    with pytest.raises(FrozenInstanceError):
        settings.workers = 3  # type: ignore[misc]


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, "workers: 3\nmode: async\nthreads: 1\n")
    settings = config.load(path, {"HOGWILD_WORKERS": "4", "HOGWILD_THREADS": "2"},
                           {"workers": "5"})
    assert (settings.workers, settings.threads, settings.mode) == (5, 2, "async")


def test_env_override_reads_types() -> None:
    settings = config.load(None, {"HOGWILD_FIT_BIAS": "false", "HOGWILD_STALENESS": "null",
                                  "HOGWILD_LEARNING_RATE": "0.25", "HOGWILD_DATA": "x.svm",
                                  "PATH": "/bin"})
    assert settings.fit_bias is False
    assert settings.staleness is None
    assert settings.learning_rate == 0.25
    assert settings.data == "x.svm"


def test_unknown_key_in_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(write(tmp_path, "workers: 2\nwokers: 3\n"))
    assert err.value.key == "wokers"
    assert "unknown setting" in str(err.value)


def test_unknown_env_variable_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        config.load(None, {"HOGWILD_THRAEDS": "2"})
    assert "HOGWILD_THRAEDS" in str(err.value)


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("workers", "three", "expected an integer"),
    ("workers", 0, "between 1 and 1024"),
    ("threads", 2.5, "expected an integer"),
    ("learning_rate", "fast", "expected a number"),
    ("learning_rate", -1, "positive"),
    ("mode", "semi", "must be one of sync, async"),
    ("fit_bias", "yes please", "true or false"),
    ("coordinator_address", "nohost", "host:port"),
    ("chunk_bytes", 8 << 20, "1048576"),
    ("staleness", 0, "between 1 and 2147483647"),
    ("epochs", None, "must be set"),
    # the wire's and the kernels' ranges: beyond them a run failed later with a traceback
    ("seed", -1, "between 0 and 2**64 - 1"),
    ("seed", 1 << 64, "between 0 and 2**64 - 1"),
    ("staleness", 1 << 31, "between 1 and 2147483647"),
    ("n_features", 1 << 33, "feature ids are 32-bit"),
    # an infinite deadline overflows the clock of every wait
    ("rpc_timeout", float("inf"), "positive and finite"),
    ("register_timeout", float("inf"), "positive and finite"),
])
def test_bad_values_name_the_key(tmp_path: Path, key: str, value: object, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(write(tmp_path, yaml.safe_dump({key: value})))
    assert err.value.key == key
    assert fragment in str(err.value)


def test_bad_flag_names_flag_source() -> None:
    with pytest.raises(ConfigError) as err:
        config.load(None, {}, {"round_size": "-3"})
    assert err.value.key == "round_size"


def test_fractions_must_leave_training_data() -> None:
    with pytest.raises(ConfigError) as err:
        config.load(None, {}, {"val_fraction": "0.5", "test_fraction": "0.5"})
    assert err.value.key == "test_fraction"


def test_combine_average_refuses_compression_that_keeps_a_residual() -> None:
    for extra in ({"delta_topk": "100"}, {"delta_threshold": "0.01"}):
        with pytest.raises(ConfigError) as err:
            config.load(None, {}, {"combine": "average", **extra})
        assert err.value.key == "combine" and "residual" in str(err.value)
    # float16 values keep only their rounding back; summed deltas take any compression.
    assert config.load(None, {}, {"combine": "average", "delta_dtype": "float16"}).combine == (
        "average")
    assert config.load(None, {}, {"combine": "sum", "delta_topk": "100"}).delta_topk == 100
    with pytest.raises(ConfigError) as err:
        config.load(None, {}, {"combine": "mean"})
    assert err.value.key == "combine"


def test_check_values_applies_the_schema_to_some_settings() -> None:
    # What holds copies of settings (a worker's run config, an experiment) checks them here:
    # read as the field's type, the bound, the choices and the rules across keys.
    assert config.check_values({"workers": 100, "learning_rate": 1}, "test") == {
        "workers": 100, "learning_rate": 1.0}
    cases = [({"workers": 2000}, "workers", "between 1 and 1024, got 2000"),
             ({"staleness": 0}, "staleness", "between 1 and 2147483647"),
             ({"mode": "semi"}, "mode", "must be one of sync, async, got 'semi'"),
             ({"epochs": True}, "epochs", "expected an integer"),
             ({"advertise_address": "nohost"}, "advertise_address", "expected host:port"),
             ({"combine": "average", "delta_topk": 5}, "combine", "residual")]
    for values, key, reason in cases:
        with pytest.raises(ConfigError) as err:
            config.check_values(values, "test")
        assert err.value.key == key and reason in err.value.reason, values
    assert config.check_values({"advertise_address": ""}, "test") == {"advertise_address": ""}


def test_not_a_mapping_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        config.load(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(tmp_path / "absent.yaml")


def test_a_key_given_twice_in_the_file_is_refused_with_both_lines(tmp_path: Path) -> None:
    # A setting put at the top of a full settings.yaml: PyYAML alone keeps the last value,
    # the default further down, and the run silently ignores what the user wrote.
    text = "epochs: 1\n" + (ROOT / "settings.yaml").read_text()
    with pytest.raises(ConfigError) as err:
        config.load(write(tmp_path, text))
    assert err.value.key == "epochs"
    line = 1 + next(i for i, row in enumerate(text.splitlines()) if i and row.startswith("epochs:"))
    assert f"given twice in {tmp_path / 'settings.yaml'} (lines 1 and {line})" in str(err.value)
    # A merge key ("<<") is not a repetition: the keys after it override the merged ones.
    merged = "base: &b {epochs: 3}\n"
    loaded = yaml.load(merged + "run:\n  <<: *b\n  epochs: 4\n",
                       Loader=settings_load._UniqueKeyLoader)
    assert loaded["run"] == {"epochs": 4}
    assert config.read_yaml(write(tmp_path, "epochs: 2\n# epochs: 5\n")) == {"epochs": 2}


def test_invalid_yaml_is_one_line_naming_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(write(tmp_path, "threads: [1\n"))
    text = str(err.value)
    assert err.value.key == "config" and "\n" not in text
    assert "is not valid YAML: line 2, column 1: expected ',' or ']'" in text


def test_replace_validates() -> None:
    settings = Settings()
    assert settings.replace(workers=7).workers == 7
    with pytest.raises(ConfigError):
        settings.replace(mode="bogus")


def test_every_field_has_help() -> None:
    for field in fields(Settings):
        assert config.help_text(field.name).strip()


def test_numbers_in_text_follow_python_rules(tmp_path: Path) -> None:
    settings = config.load(None, {"HOGWILD_L2": "1e-05"}, {"learning_rate": "2E-1"})
    assert settings.l2 == 1e-05
    assert settings.learning_rate == 0.2
    # In the YAML file, a float without a dot is YAML's business: it must still be a number.
    assert config.load(write(tmp_path, "l2: 1.0e-6\n")).l2 == 1e-6
    with pytest.raises(ConfigError) as err:
        config.load(None, {}, {"l2": "nan-ish"})
    assert err.value.key == "l2"


def test_settings_file_is_the_rendered_schema() -> None:
    # settings.yaml is generated from the schema's help texts: `python -m hogwild.config`.
    assert (ROOT / "settings.yaml").read_text() == config.render_settings_yaml()
