"""Drift against a reference data report (data.validation.reference: a pinned report.json, or `auto`: the
first prepared version's, pinned at data.validation.auto_reference). The checks, each with its own policy
(data.validation.drift: one warn | fail for all, or a mapping per check):

- classes: a class added or missing;
- class_share: the class shares moved by more than max_share_shift (L-infinity: one line per class) or,
  with share_distance=js, by more than max_share_divergence (Jensen-Shannon divergence, as TFDV's);
- oov: the out-of-vocabulary rate up by more than max_oov_increase;
- text_length: a split's median or p95 length in tokens moved (either way) by more than max_length_shift
  times the reference's (texts only: image reports have no lengths);
- image_modes: a source image mode (RGB, L, RGBA...) the reference did not have;
- image_stats: a per-channel pixel mean or std moved by more than max_pixel_shift (0..255).

Each anomaly is one line naming the split, the field, the reference value and the new one."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

from tfpipe.config.validation_schema import AUTO_REFERENCE, ValidationConfig
from tfpipe.errors import DataError

log = logging.getLogger(__name__)


def reference_path(validation) -> Path | None:
    """The reference report's path: data.validation.reference, or auto_reference when it is `auto`."""
    path = validation.reference
    if not path:
        return None
    return Path(validation.auto_reference if path == AUTO_REFERENCE else path)


def load_reference(cfg) -> dict | None:
    """The reference report, checked before anything is read: it exists, is a report, of this modality.
    None when there is no reference, or with `auto` before the first prepare has pinned one."""
    path = reference_path(cfg.data.validation)
    if path is None:
        return None
    auto = cfg.data.validation.reference == AUTO_REFERENCE
    key = f"data.validation.{'auto_reference' if auto else 'reference'}={str(path)!r}"
    if auto and not path.exists():
        return None  # the first prepare: its report becomes the reference (pin_first)
    if not path.is_file():
        raise DataError(f"{key}: file not found; expected a report.json written by prepare")
    try:
        reference = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{key}: not a readable JSON data report ({type(exc).__name__})") from None
    if not isinstance(reference, dict) or "splits" not in reference or "modality" not in reference:
        raise DataError(
            f"{key}: not a data report (no 'splits'/'modality'); expected a report.json from prepare"
        )
    if reference["modality"] != cfg.dataset.modality:
        raise DataError(
            f"{key}: a report of {reference['modality']} data, but dataset {cfg.dataset.name!r} is "
            f"{cfg.dataset.modality}; use a report.json of this dataset"
        )
    return reference


def pin_first(cfg, reference: dict | None, prepared: Path) -> None:
    """reference=auto, first prepare: copy the new report.json to auto_reference (atomically)."""
    validation = cfg.data.validation
    if validation.reference != AUTO_REFERENCE or reference is not None:
        return
    from tfpipe.data.report import REPORT_FILE

    target = reference_path(validation)
    assert target is not None, "reference=auto names auto_reference"
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    part.write_bytes((Path(prepared) / REPORT_FILE).read_bytes())
    os.replace(part, target)
    log.info("data.validation.reference=auto: pinned %s as the reference of later prepares", target)


def _setting(validation, key: str):
    """A threshold from data.validation (the schema default when a partial config lacks it)."""
    return getattr(validation, key, getattr(ValidationConfig, key))


def js_divergence(p: list, q: list) -> float:
    """Jensen-Shannon divergence (log base 2, so in [0, 1]) of two distributions. Written out: a 5-line
    formula needs no library (scipy is only a transitive pin of scikit-learn, not one of ours)."""
    m = [(x + y) / 2 for x, y in zip(p, q)]
    kl = [sum(x * math.log2(x / y) for x, y in zip(d, m) if x > 0) for d in (p, q)]
    return max(0.0, (kl[0] + kl[1]) / 2)


def _shares(classes: dict, names: list) -> list:
    return [classes[n]["share"] or 0.0 for n in names]


def _class_anomalies(split: str, old: dict, new: dict, validation) -> list:
    old_classes, new_classes = old.get("classes", {}), new.get("classes", {})
    lines = [
        ("classes", f"{split}: class {c!r}: reference has it, now missing")
        for c in sorted(set(old_classes) - set(new_classes))
    ]
    lines += [
        ("classes", f"{split}: class {c!r}: not in the reference, now added")
        for c in sorted(set(new_classes) - set(old_classes))
    ]
    common = sorted(set(old_classes) & set(new_classes))
    before, after = _shares(old_classes, common), _shares(new_classes, common)
    if _setting(validation, "share_distance") == "js":
        divergence, limit = js_divergence(before, after), _setting(validation, "max_share_divergence")
        if divergence > limit:
            show = lambda shares: " ".join(f"{n} {s:.4f}" for n, s in zip(common, shares))  # noqa: E731
            lines.append(
                (
                    "class_share",
                    f"{split}: class shares: reference {show(before)}, now {show(after)} "
                    f"(Jensen-Shannon divergence {divergence:.4f} > {limit})",
                )
            )
        return lines
    for name, b, a in zip(common, before, after):
        if abs(a - b) > _setting(validation, "max_share_shift"):
            lines.append(("class_share", f"{split}: share of class {name!r}: reference {b:.4f}, now {a:.4f}"))
    return lines


def _image_anomalies(split: str, old: dict, new: dict, validation) -> list:
    lines = []
    if "source_images" in old:  # reports written before it was counted have none: nothing to compare
        known, modes = old["source_images"]["modes"], new.get("source_images", {}).get("modes", {})
        lines += [
            ("image_modes", f"{split}: source images of mode {m!r}: reference 0, now {n}")
            for m, n in modes.items()
            if m not in known
        ]
    limit = _setting(validation, "max_pixel_shift")
    for field in ("pixel_mean", "pixel_std"):
        before, after = old.get(field), new.get(field)
        if not before or not after or len(before) != len(after):
            continue
        for channel, (b, a) in enumerate(zip(before, after)):
            if abs(a - b) > limit:
                lines.append(("image_stats", f"{split}: {field}[{channel}]: reference {b:.3f}, now {a:.3f}"))
    return lines


def _length_anomalies(split: str, old: dict, new: dict, validation) -> list:
    """The median and p95 token length, each against max_length_shift times the reference's (at least 1
    token, so a split of empty documents still has a scale)."""
    before, after = old.get("tokens") or {}, new.get("tokens") or {}
    limit = _setting(validation, "max_length_shift")
    lines = []
    for stat in ("median", "p95"):
        b, a = before.get(stat), after.get(stat)
        if b is not None and a is not None and abs(a - b) > limit * max(b, 1.0):
            lines.append(("text_length", f"{split}: tokens.{stat}: reference {b:.1f}, now {a:.1f}"))
    return lines


def anomalies(reference: dict, report: dict, validation) -> list:
    """(check, line) for every anomaly of `report` against `reference`."""
    found = []
    for split, new in report["splits"].items():
        old = reference["splits"].get(split)
        if old is None:
            continue
        found += _class_anomalies(split, old, new, validation)
        before, after = old.get("oov_rate"), new.get("oov_rate")
        if (
            before is not None
            and after is not None
            and after - before > _setting(validation, "max_oov_increase")
        ):
            found.append(("oov", f"{split}: oov_rate: reference {before:.4f}, now {after:.4f}"))
        found += _length_anomalies(split, old, new, validation)
        found += _image_anomalies(split, old, new, validation)
    return found


def compare(reference: dict, report: dict, validation) -> list:
    """The anomalies of `report` against `reference`, one line each."""
    return [line for _, line in anomalies(reference, report, validation)]


def apply(reference: dict | None, report: dict, validation) -> None:
    """Record the anomalies in the report (`drift`), then warn or fail (DataError, one line) per check's policy."""
    if reference is None:
        return
    found = anomalies(reference, report, validation)
    policies = validation.drift_policies()
    report["drift"] = {
        "reference": str(reference_path(validation)),
        "policy": validation.drift,
        "share_distance": validation.share_distance,
        "anomalies": [line for _, line in found],
    }
    failing = [(check, line) for check, line in found if policies[check] == "fail"]
    if failing:
        check, first = failing[0]
        key = (
            "data.validation.drift" if isinstance(validation.drift, str) else f"data.validation.drift.{check}"
        )
        more = f" (and {len(failing) - 1} more)" if len(failing) > 1 else ""
        raise DataError(f"{key}=fail: {first}{more}; or set {key}=warn")
    for _, line in found:
        log.warning("drift: %s", line)
