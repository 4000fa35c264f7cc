"""InfiAgent-DABench (Apache-2.0) as an eval suite: `make eval SUITE=dabench`.

The dev set's questions, labels and tables are taken at eval time from the benchmark's
public repository at a pinned commit (:data:`PINNED`) into the eval cache
(``$LILY_EVAL_CACHE/dabench/<commit>``), never into this repository. ``DABENCH_REPO`` names a
local copy (a clone or a bare git directory holding that commit); without it the repository
is cloned from :data:`UPSTREAM` into the cache (network). ``DABENCH_COMMIT`` pins another
commit (the smoke test's fake repository).

Each question is one task: a fresh Lily kernel whose workspace holds the question's table;
the prompt is the question, the table's file name, the constraints and the answer's format,
as the benchmark states them. The final answer is scored with the benchmark's closed-form
rules (``examples/DA-Agent/eval_closed_form.py``, reimplemented here line for line:
:func:`extract_format`, :func:`is_equal`, :func:`evaluate_responses`): every
``@name[value]`` of the label must be in the answer, equal as text or within 1e-6 as numbers.
After the strict score, the benchmark's reformat step (``reformat.py``: the question, the
answer, then its template with two examples, temperature 0) runs on the same model, and the
reformatted answer is scored again. A ``responses.jsonl`` in the benchmark's own shape is
written beside the results, so its own ``eval_closed_form.py`` can judge the run too.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fetch
from tasks import Outcome, Task

UPSTREAM = "https://github.com/InfiAgent/InfiAgent"
PINNED = "d02d18a64da23f9dcc8f5a529f6203e0010c2072"  # main, 2024-04; the dev set's last change
DATA = "examples/DA-Agent/data"
QUESTIONS, LABELS, TABLES = "da-dev-questions.jsonl", "da-dev-labels.jsonl", "da-dev-tables"
FROM_ID = 150  # the slice: dev questions with id >= 150 (ids below were seen while building)
LIMIT = 60     # the first 60 of them by id: 20 easy, 20 medium, 20 hard


# -- the data, at the pinned commit --------------------------------------------------------

def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)


def data_dir(repo: str | None = None, commit: str | None = None) -> Path:
    """The dev set at ``commit`` in the eval cache: questions, labels and the tables it
    names, taken from ``repo`` (``DABENCH_REPO``; a clone of :data:`UPSTREAM` otherwise)."""
    commit = commit or os.environ.get("DABENCH_COMMIT") or PINNED
    target = fetch.cache_dir() / "dabench" / commit[:12]
    if (target / "complete").exists():
        return target
    source = Path(repo or os.environ.get("DABENCH_REPO") or _clone())
    if _git("-C", str(source), "cat-file", "-e", f"{commit}^{{commit}}").returncode:
        raise SystemExit(f"Error: {source} does not hold commit {commit[:12]}; fetch it there, "
                         "or point DABENCH_REPO at a copy that does")
    target.mkdir(parents=True, exist_ok=True)
    listing = _git("-C", str(source), "ls-tree", "-r", commit, f"{DATA}/")
    if listing.returncode:
        raise SystemExit(f"Error: git ls-tree {commit[:12]} {DATA} failed in {source}")
    missing = []
    for line in listing.stdout.decode().splitlines():
        meta, path = line.split("\t", 1)
        blob = _git("-C", str(source), "cat-file", "blob", meta.split()[2])
        if blob.returncode:  # a partial copy (a shallow or filtered clone) lacks the blob
            missing.append(path)
            continue
        out = target / Path(path).relative_to(DATA)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob.stdout)
    for name in (QUESTIONS, LABELS):
        if not (target / name).exists():
            raise SystemExit(f"Error: {source} at {commit[:12]} has no {DATA}/{name}")
    if missing:  # the questions on these tables are left out, and the run says how many
        (target / "missing.txt").write_text("".join(f"{Path(p).name}\n" for p in missing))
    (target / "complete").write_text(commit + "\n")
    return target


def _clone() -> Path:
    dest = fetch.cache_dir() / "dabench" / "repo.git"
    if not dest.exists():
        done = _git("clone", "--bare", "--filter=blob:none", UPSTREAM, str(dest))
        if done.returncode:
            raise SystemExit("Error: could not clone the DABench repository; set DABENCH_REPO "
                             "to a local copy")
    return dest


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


@dataclass
class Question:
    id: int
    question: str
    constraints: str
    format: str
    file_name: str
    level: str
    answers: dict[str, str]  # the label: name -> value

    @property
    def prompt(self) -> str:
        """What the user asks Lily: the question, the table's file, the constraints and the
        answer's format, as the benchmark states them."""
        return (f"{self.question.strip()}\nThe data is in the file {self.file_name}.\n"
                f"Constraints: {self.constraints.strip()}\n"
                f"Answer format: {self.format.strip()}")


def questions(data: Path, from_id: int = FROM_ID, limit: int | None = LIMIT,
              log: Callable[[str], None] = print) -> list[Question]:
    """The slice: dev questions with id >= ``from_id``, by id, the first ``limit``; those
    whose table the local copy lacks are left out (and counted in a line of ``log``)."""
    labels = {r["id"]: {a[0]: a[1] for a in r["common_answers"]} for r in _jsonl(data / LABELS)}
    out = [Question(q["id"], q["question"], q.get("constraints", ""), q.get("format", ""),
                    q["file_name"], q.get("level", "?"), labels[q["id"]])
           for q in sorted(_jsonl(data / QUESTIONS), key=lambda q: q["id"])
           if q["id"] >= from_id and q["id"] in labels]
    present = [q for q in out if (data / TABLES / q.file_name).is_file()]
    if len(present) < len(out):
        left = sorted({q.file_name for q in out} - {q.file_name for q in present})
        log(f"DABench: {len(out) - len(present)} questions left out: the local copy lacks "
            f"their table ({', '.join(left[:5])}{', …' if len(left) > 5 else ''})")
    return present[:limit] if limit else present


# -- the benchmark's closed-form rules (eval_closed_form.py) ---------------------------------

def extract_format(text: str) -> tuple[list[str], list[str]]:
    """Every ``@name[value]`` in ``text``: (names, values)."""
    matches = re.findall(r"@(\w+)\[(.*?)\]", text)
    return [m[0] for m in matches], [m[1] for m in matches]


def is_equal(response: str | None, label: str) -> bool:
    """Equal as text, or as numbers within 1e-6."""
    if response == label:
        return True
    try:
        return abs(float(response) - float(label)) < 1e-6  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def correctness(answers: dict[str, str], response: str) -> dict[str, bool]:
    """Each label's sub-answer: is it in ``response``, right (``evaluate_responses``)."""
    names, values = extract_format(response)
    extracted = dict(zip(names, values, strict=True))
    return {name: is_equal(extracted.get(name), value) for name, value in answers.items()}


def scores(rows: list[dict[str, bool] | None]) -> dict[str, float]:
    """The benchmark's three accuracies over ``rows`` (one per question: its correctness, or
    None when the response was empty), and ABQ over every question of the slice. The
    benchmark leaves out questions whose response is empty (``evaluate_responses``), so its
    ABQ is over the answered ones; the slice's counts an empty answer as wrong."""
    judged = [r for r in rows if r is not None]
    right = sum(all(r.values()) for r in judged)
    subs = sum(len(r) for r in judged)
    return {
        "questions": len(rows),
        "answered": len(judged),
        "correct": right,
        "abq_slice": round(right / len(rows), 4) if rows else 0.0,
        "abq": round(right / len(judged), 4) if judged else 0.0,
        "proportional": round(sum(sum(r.values()) / len(r) for r in judged if r) / len(judged), 4)
        if judged else 0.0,
        "by_sub_question": round(sum(sum(r.values()) for r in judged) / subs, 4) if subs else 0.0,
    }


# -- the benchmark's reformat step (reformat.py) ---------------------------------------------

# reformat.py's ``demons`` and ``reformat_template``, character for character (their trailing
# spaces too; ``demons`` is inserted by str.format, so its doubled braces stay doubled)
DEMONS = ("\\Format{{\n"
          "@shapiro_wilk_statistic[test_statistic]\n"
          "@shapiro_wilk_p_value[p_value]\n"
          'where "test_statistic" is a number between 0 and 1 representing the Shapiro-Wilk test '
          "statistic. Rounding off the answer to two decimal places.\n"
          'where "p_value" is a number between 0 and 1 representing the p-value from the '
          "Shapiro-Wilk test. Rounding off the answer to four decimal places.\n"
          "}}\n"
          "\\Answer{{\n"
          "@shapiro_wilk_statistic[0.56]\n"
          "@shapiro_wilk_p_value[0.0002]   \n"
          "}}\n"
          "\n"
          "\\Format{{\n"
          "@total_votes_outliers_num[outlier_num]\n"
          'where "outlier_num" is an integer representing the number of values considered '
          "outliers in the 'total_votes' column.\n"
          "}}\n"
          "\\Answer{{\n"
          "@total_votes_outliers[10]   \n"
          "}}\n")
REFORMAT = ("You should strictly follow the output requirements in the Format part. Here're some "
            "examples: \n"
            "{demons}. \n"
            'Your answer should contain all the "@answer_name[answer]" in the order mentioned, '
            'each "answer" should be in the range of value as required. \n'
            "The format requirements of this question is:\n"
            "{format}. Please give your answer:")


def reformat_messages(q: Question, response: str) -> list[dict[str, str]]:
    """reformat.py's three messages: the question, the answer, the format request."""
    return [{"role": "user", "content": q.question},
            {"role": "assistant", "content": response},
            {"role": "user", "content": REFORMAT.format(demons=DEMONS, format=q.format)}]


def reformat(base_url: str, model: str, q: Question, response: str,
             timeout: float = 600) -> str:
    """The answer after the benchmark's reformat step, on the same model (temperature 0,
    max_tokens 2048 as reformat.py sends)."""
    body = json.dumps({"model": model, "messages": reformat_messages(q, response),
                       "temperature": 0, "max_tokens": 2048}).encode()
    request = urllib.request.Request(f"{base_url.rstrip('/')}/chat/completions", data=body,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": "Bearer sk-local-eval"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            data = json.loads(r.read())
        return str(data["choices"][0]["message"]["content"] or "")
    except (OSError, ValueError, KeyError, IndexError) as exc:
        return f"(reformat failed: {type(exc).__name__})"


# -- as eval tasks -------------------------------------------------------------------------

#: The final answer of each question's task, by task name, as its check saw it.
FINAL: dict[str, str] = {}


def task_name(q: Question) -> str:
    return f"dabench-{q.id}"


def _check(q: Question) -> Callable[[Outcome], str | None]:
    def check(o: Outcome) -> str | None:
        FINAL[task_name(q)] = o.final
        names, values = extract_format(o.final)
        given = dict(zip(names, values, strict=True))
        wrong = [f"@{n}[{given[n]}] not [{q.answers[n]}]" if n in given else f"no @{n}[…]"
                 for n, ok in correctness(q.answers, o.final).items() if not ok]
        return "; ".join(wrong)[:200] or None
    return check


def tasks(data: Path, qs: list[Question]) -> list[Task]:
    """One eval task per question: its table copied into the workspace."""
    return [Task(task_name(q), q.prompt, _check(q),
                 copies={q.file_name: data / TABLES / q.file_name}) for q in qs]


def report(qs: list[Question], base_url: str, model: str, out: Path | None,
           log: Callable[[str], None] = print) -> dict[str, Any]:
    """Strict and reformatted scores of the run's final answers; with ``out`` (the results
    JSON's path), ``<stem>-responses.jsonl`` in the benchmark's shape beside it."""
    rows: list[dict[str, Any]] = []
    for q in qs:
        name = task_name(q)
        if name not in FINAL:
            continue  # not run (a harness error)
        final = FINAL[name]
        again = reformat(base_url, model, q, final) if final.strip() else ""
        rows.append({"id": q.id, "level": q.level, "response": final, "reformatted": again,
                     "strict": correctness(q.answers, final) if final.strip() else None,
                     "after_reformat": correctness(q.answers, again) if again.strip() else None})
    strict = scores([r["strict"] for r in rows])
    after = scores([r["after_reformat"] for r in rows])
    by_level = {level: {"strict": scores([r["strict"] for r in rows if r["level"] == level]),
                        "after_reformat": scores([r["after_reformat"] for r in rows
                                                  if r["level"] == level])}
                for level in ("easy", "medium", "hard")}
    log(f"\nDABench: {len(rows)} questions; ABQ strict {strict['correct']}/{len(rows)} "
        f"({100 * strict['abq_slice']:.0f}%), after reformat {after['correct']}/{len(rows)} "
        f"({100 * after['abq_slice']:.0f}%)")
    for level, s in by_level.items():
        log(f"  {level:6} strict {s['strict']['correct']}/{s['strict']['questions']}, "
            f"after reformat {s['after_reformat']['correct']}/{s['after_reformat']['questions']}")
    summary = {"strict": strict, "after_reformat": after, "by_level": by_level, "rows": rows}
    if out is not None:
        stem = out.with_suffix("")
        with Path(f"{stem}-responses.jsonl").open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({"id": r["id"], "response": r["response"]}) + "\n")
        with Path(f"{stem}-reformatted.jsonl").open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({"id": r["id"], "response": r["reformatted"]}) + "\n")
    return summary
