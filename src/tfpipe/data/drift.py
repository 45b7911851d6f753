"""Drift against a reference data report (data.validation.reference, e.g. a pinned report.json of the first
prepared version): classes added or missing, a class share moved by more than max_share_shift (L-infinity,
as TFDV's), the out-of-vocabulary rate up by more than max_oov_increase, a source image mode (RGB, L, RGBA...)
the reference did not have. Each anomaly is one line naming the
split, the field, the reference value and the new one; data.validation.drift decides: warn | fail."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tfpipe.errors import DataError

log = logging.getLogger(__name__)


def load_reference(cfg) -> dict | None:
    """The reference report, checked before anything is read: it exists, is a report, of this modality."""
    path = cfg.data.validation.reference
    if not path:
        return None
    path = Path(path)
    key = f"data.validation.reference={str(path)!r}"
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


def _class_anomalies(split: str, old: dict, new: dict, max_shift: float) -> list:
    old_classes, new_classes = old.get("classes", {}), new.get("classes", {})
    lines = [
        f"{split}: class {c!r}: reference has it, now missing"
        for c in sorted(set(old_classes) - set(new_classes))
    ]
    lines += [
        f"{split}: class {c!r}: not in the reference, now added"
        for c in sorted(set(new_classes) - set(old_classes))
    ]
    for name in sorted(set(old_classes) & set(new_classes)):
        before, after = old_classes[name]["share"] or 0.0, new_classes[name]["share"] or 0.0
        if abs(after - before) > max_shift:
            lines.append(f"{split}: share of class {name!r}: reference {before:.4f}, now {after:.4f}")
    return lines


def compare(reference: dict, report: dict, validation) -> list:
    """The anomalies of `report` against `reference`, one line each."""
    lines = []
    for split, new in report["splits"].items():
        old = reference["splits"].get(split)
        if old is None:
            continue
        lines += _class_anomalies(split, old, new, validation.max_share_shift)
        before, after = old.get("oov_rate"), new.get("oov_rate")
        if before is not None and after is not None and after - before > validation.max_oov_increase:
            lines.append(f"{split}: oov_rate: reference {before:.4f}, now {after:.4f}")
        if "source_images" in old:  # reports written before it was counted have none: nothing to compare
            known, modes = old["source_images"]["modes"], new.get("source_images", {}).get("modes", {})
            new_modes = [(m, n) for m, n in modes.items() if m not in known]
            lines += [f"{split}: source images of mode {m!r}: reference 0, now {n}" for m, n in new_modes]
    return lines


def apply(reference: dict | None, report: dict, validation) -> None:
    """Record the anomalies in the report (`drift`), then warn or fail (DataError, one line) per the policy."""
    if reference is None:
        return
    anomalies = compare(reference, report, validation)
    report["drift"] = {
        "reference": str(validation.reference),
        "policy": validation.drift,
        "anomalies": anomalies,
    }
    if anomalies and validation.drift == "fail":
        more = f" (and {len(anomalies) - 1} more)" if len(anomalies) > 1 else ""
        raise DataError(
            f"data.validation.drift=fail: {anomalies[0]}{more}; or set data.validation.drift=warn"
        )
    for line in anomalies:
        log.warning("drift: %s", line)
