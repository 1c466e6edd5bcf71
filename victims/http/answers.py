"""Answer shapes beyond a numeric array (docs/endpoints.md "Answer shapes"): an MLflow pyfunc that
returns a DataFrame answers records (`[{"col": value, ...}, ...]`); a classifier may answer string
class labels. Both become the numeric array the client validates:

- records: each row's values in column order; when `victim.endpoint.classes` names the classes
  and the columns are those names, in the classes' order (a probability per class);
- string labels: their index in `victim.endpoint.classes` (or the model metadata's
  `parameters.classes`); a label not in the list is an error naming it.

Column names for requests (`dataframe_split`) come from `victim.endpoint.columns`: a list, or the
path of an MLflow model's `MLmodel` file whose column-based signature names them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from victims.errors import BadInput
from victims.http.secrets import clip
from victims.http.wire_base import AnswerError


def decode(answer: Any, classes: list[str] | None) -> Any:
    """The answer with records flattened and string labels mapped to class indices."""
    if isinstance(answer, dict) and answer and all(isinstance(v, list) for v in answer.values()):
        cols = _order(list(answer), classes)  # a DataFrame in "list" orientation: {col: [values]}
        n = {len(answer[c]) for c in cols}
        if len(n) != 1:
            raise AnswerError("the answer's columns have different lengths")
        answer = [{c: answer[c][i] for c in cols} for i in range(n.pop())]
    if isinstance(answer, list) and answer and all(isinstance(r, dict) for r in answer):
        cols = _order(list(answer[0]), classes)
        try:
            answer = [[r[c] for c in cols] for r in answer]
        except KeyError as exc:
            raise AnswerError(f"the answer's records differ in their columns ({clip(str(exc), 40)})") \
                from None
    return _labels(answer, classes)


def _order(cols: list[str], classes: list[str] | None) -> list[str]:
    if classes and set(classes) <= set(cols) and len(cols) == len(classes):
        return list(classes)
    return cols


def _labels(answer: Any, classes: list[str] | None) -> Any:
    """String labels (anywhere in a nested list) → class indices."""
    if isinstance(answer, str):
        if not classes:
            raise AnswerError(f"the endpoint answers string labels ({clip(answer, 40)!r}): list the classes "
                              "in victim.endpoint.classes (index = class)")
        try:
            return classes.index(answer)
        except ValueError:
            raise AnswerError(f"label {clip(answer, 40)!r} is not in victim.endpoint.classes "
                              f"({', '.join(clip(c, 20) for c in classes[:8])})") from None
    if isinstance(answer, list) and any(isinstance(v, str | list) for v in answer[:1]):
        return [_labels(v, classes) for v in answer]
    return answer


def columns_of(spec: Any) -> list[str] | None:
    """The request's column names: `columns` as a list, or read from an MLmodel file's signature.
    BadInput naming the key when the file has no column-based signature."""
    cols = getattr(spec, "columns", None)
    if cols is None or isinstance(cols, list):
        return cols
    import yaml

    try:
        meta = yaml.safe_load(Path(cols).expanduser().read_text())
        inputs = json.loads(meta["signature"]["inputs"])
        names = [str(t["name"]) for t in inputs]
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        raise BadInput(f"victim.endpoint.columns: {clip(str(cols), 120)!r} is no MLmodel file with a "
                         "column-based signature (signature.inputs with names)") from None
    if not names:
        raise BadInput(f"victim.endpoint.columns: the signature in {clip(str(cols), 120)!r} names no "
                         "columns")
    return names
