"""Only what the model said (issue 37 items 1, 2, 4, 9, 14): a constrained step's answer is
matched whole against exactly the forms it was held to, an answer outside them or unfinished
is the server's failure (never a decision), and choice lists that could be read as each other
are read right or refused before a call."""

from __future__ import annotations

import pytest

from sparkops.batch.fate import Fates, RecordState, Stats
from sparkops.batch.outcome import Answer, Kind, unheld
from sparkops.batch.records import Record
from sparkops.batch.stop_rules import UNHELD_IN_A_ROW, Unheld
from sparkops.batch.truncation import Truncation
from sparkops.batch.workload import Pipeline
from sparkops.errors import UserError
from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.folder import RESULTS
from sparkops.jobdir.journal import Journal
from sparkops.jobdir.lines import cut_off
from sparkops.pipeline import constrain
from sparkops.pipeline.parse import parse_label, read_held
from sparkops.pipeline.spec import ParseSpec, parse_pipeline


def spec(choices: list[str], **step: object) -> Pipeline:
    labels = {c: "stop" for c in choices} | {"unclear": "stop"}
    return Pipeline(
        parse_pipeline(
            {
                "name": "t",
                "model": "m",
                "steps": [
                    {
                        "name": "s",
                        "user": "Note: {text}",
                        "parse": {"choices": choices},
                        "next": labels,
                        **step,
                    }
                ],
            }
        )
    )


def answer(text: str | None, reason: str | None = "stop") -> Answer:
    body = {"choices": [{"message": {"content": text}, "finish_reason": reason}], "model": "m"}
    return Answer(200, body, text, "m", "req-1", {})


def state(work: Pipeline) -> RecordState:
    return RecordState(Record("r1", 1, {"text": "x"}), work.first_step)


@pytest.fixture
def fates(tmp_path):
    journal = Journal(tmp_path, "id", fsync_interval=0)
    journal.open()
    fates = Fates(journal, Stats(), run=1)
    yield fates
    fates.close()
    journal.close()


# ---- item 2: a held answer is matched whole, case folded, against the allowed forms --------
@pytest.mark.parametrize(
    ("choices", "text", "read"),
    [
        (["stroke", "not stroke"], "Not stroke", "not stroke"),
        (["stroke", "not stroke"], "NOT STROKE", "not stroke"),
        (["stroke", "not stroke"], "Stroke", "stroke"),
        (["yes", "yes, urgent", "no"], "Yes, urgent", "yes, urgent"),
        (["yes", "yes, urgent", "no"], "Yes", "yes"),
        (["sí", "no"], "Sí", "sí"),
        (["straße", "ödem"], "Straße", "straße"),
        (["straße", "ödem"], "STRASSE", "straße"),  # the upper-case form the kit allows
        (["straße", "ödem"], "Ödem", "ödem"),
        # outside every allowed form: no decision, whatever words it holds
        (["yes", "no"], "The answer is not yes.", None),
        (["yes", "no"], "I cannot say yes.", None),
        (["yes", "no"], "yes.", None),
        (["yes", "no"], "yEs", "yes"),  # case folded: the same word, whatever its case
        (["yes", "no"], "", None),
    ],
)
def test_a_held_answer_is_one_allowed_form_whole(choices, text, read):
    assert read_held(text, ParseSpec(choices=choices)) == read
    if read is not None:  # read as the choice whose allowed form it folds to
        allowed = constrain.allowed_answers([read])
        assert text.casefold() in {a.casefold() for a in allowed}


def test_every_allowed_form_reads_back_as_its_own_choice():
    choices = ["stroke", "not stroke", "yes", "yes, urgent", "sí", "straße", "ödem"]
    parse = ParseSpec(choices=choices)
    for choice in choices:
        for form in constrain.allowed_answers([choice]):
            assert read_held(form, parse) == choice, form


@pytest.mark.parametrize(
    ("choices", "text", "label"),
    [
        (["stroke", "not stroke"], "Not stroke", "not stroke"),
        (["stroke", "not stroke"], "Answer: not stroke.", "not stroke"),
        (["stroke", "not stroke"], "Stroke.", "stroke"),
        (["yes", "yes, urgent", "no"], "Yes, urgent.", "yes, urgent"),
        (["sí", "no"], "Sí.", "sí"),
        (["yes", "no"], "Yes.", "yes"),
        (["yes", "no"], "maybe yes maybe no", "unclear"),
    ],
)
def test_free_text_prefers_the_longest_choice_and_reads_any_script(choices, text, label):
    assert parse_label(text, ParseSpec(choices=choices))[0] == label


def test_choices_that_fold_to_one_answer_are_refused():
    with pytest.raises(UserError, match=r"'straße' and 'STRASSE' are the same answer"):
        spec(["straße", "STRASSE"])
    with pytest.raises(UserError, match="same answer once case is ignored"):
        spec(["Yes", "yes"])


# ---- item 9: one choice, and record fields in a system prompt -----------------------------
def test_a_held_step_with_one_choice_is_refused_and_a_free_one_is_not():
    with pytest.raises(UserError, match=r"step 's' has one choice \['yes'\].*add the other"):
        spec(["yes"])
    assert spec(["yes"], constrain=False).spec.step("s").parse is not None


def test_a_record_field_in_a_system_prompt_is_refused_with_the_fix():
    with pytest.raises(UserError, match=r"system prompt has \{age\}.*user template"):
        spec(["yes", "no"], system="The patient is {age} years old. Answer yes or no.")
    # JSON in a system prompt is not a field
    work = spec(["yes", "no"], system='Answer as {"answer": "yes"} would, in one word.')
    assert work.spec.step("s").system.startswith("Answer")


# ---- items 1 and 4: the judge -------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "reason", "kind"),
    [
        ("yes", "stop", None),
        ("Yes", "stop", None),
        ("The answer is not yes.", "stop", Kind.UNHELD),
        ("I cannot say yes.", "stop", Kind.UNHELD),
        ("", "stop", Kind.UNHELD),
        ("yes", "abort", Kind.UNFINISHED),
        ("", "abort", Kind.UNFINISHED),
        ("ye", None, Kind.UNFINISHED),
        ("yes", "content_filter", Kind.UNFINISHED),
        ("ye", "length", None),  # cut off inside an allowed form: held, counted as cut
        ("maybe", "length", Kind.UNHELD),  # cut off, but no allowed form starts so
    ],
)
def test_only_a_finished_answer_the_constraint_allows_is_an_answer(text, reason, kind):
    work = spec(["yes", "no"])
    failure = work.judge(state(work), answer(text, reason))
    assert (failure.kind if failure else None) is kind
    if failure is not None:
        assert failure.is_servers_fault  # retried, never the end of a record


def test_a_free_step_takes_free_text_but_never_an_unfinished_answer():
    work = spec(["yes", "no"], constrain=False)
    assert work.judge(state(work), answer("The answer is yes.")) is None
    failure = work.judge(state(work), answer("yes", "abort"))
    assert failure is not None and failure.kind is Kind.UNFINISHED


def test_a_json_step_answered_in_free_text_is_unheld():
    pipeline = parse_pipeline(
        {
            "name": "t",
            "model": "m",
            "steps": [{"name": "x", "user": "{text}", "extract": {"fields": {"side": ["l", "r"]}}}],
        }
    )
    work = Pipeline(pipeline)
    at = RecordState(Record("r1", 1, {"text": "x"}), "x")
    assert work.judge(at, answer("Hello! The side is left.")).kind is Kind.UNHELD
    assert work.judge(at, answer('{"side": "l"}')) is None
    assert work.judge(at, answer('{"side": "l', "length")) is None  # cut: validated later


# ---- item 14 and prefixes: what a cut-off held answer is ----------------------------------
def test_a_whole_form_at_max_tokens_is_complete_and_not_counted_as_cut(fates, tmp_path):
    work = spec(["oui", "non"])
    assert work.judge(state(work), answer("oui", "length")) is None
    assert work.answered(state(work), answer("oui", "length"), fates) is None
    (line,) = iter_json_lines(tmp_path / RESULTS)
    (entry,) = line["steps"]
    assert line["final"] == "oui" and entry["parsed"] is True and entry["complete"] is True
    assert not cut_off(entry)
    counted = Truncation()
    counted.count(line["steps"])
    assert counted.cut["s"] == 0 and counted.answers["s"] == 1


def test_a_cut_answer_that_may_start_a_longer_choice_is_no_decision(fates, tmp_path):
    work = spec(["yes", "yes, urgent", "no"])
    assert work.judge(state(work), answer("yes", "length")) is None  # held, but cut short
    work.answered(state(work), answer("yes", "length"), fates)
    work.answered(state(work), answer("Yes, urgent", "stop"), fates)
    cut, whole = iter_json_lines(tmp_path / RESULTS)
    assert (cut["final"], cut["steps"][0]["parsed"]) == ("unclear", False)
    assert cut_off(cut["steps"][0])
    assert (whole["final"], whole["steps"][0]["parsed"]) == ("yes, urgent", True)


def test_the_derived_budget_fits_every_form_in_bytes_whatever_the_tokenizer_says():
    work = spec(["oui", "non"])
    # the server's tokenizer says one token each; a grammar may spell "oui" o-u-i
    budget = constrain.budgets(work.spec, lambda text: 1)
    assert budget["s"] == len(b"OUI") + 1
    assert constrain.budgets(spec(["straße", "ödem"]).spec)["s"] == len("STRASSE") + 1


# ---- the rule that stops a job whose server no longer holds the constraint -----------------
def test_an_endpoint_that_keeps_breaking_the_constraint_stops_the_job_once_warned():
    said: list[str] = []
    rule = Unheld(on_warning=said.append)
    failure = unheld("s", "choice")
    for _ in range(UNHELD_IN_A_ROW - 1):
        assert rule.broke("http://a:8000", failure) is None
        rule.held("http://b:8000")  # another endpoint's good answers do not reset it
    assert len(said) == 1 and "http://a:8000 did not hold the structured-output" in said[0]
    stop = rule.broke("http://a:8000", failure)
    assert stop is not None and stop.kind == "unheld"
    assert "http://a:8000 stopped holding the structured-output constraint" in stop.message
    assert "run the same command again to resume" in stop.message


def test_a_router_that_drops_the_field_now_and_then_never_stops_the_job():
    rule = Unheld()
    for i in range(10 * UNHELD_IN_A_ROW):
        if i % 10 == 0:
            assert rule.broke("http://router:4000", unheld("s", "choice")) is None
        else:
            rule.held("http://router:4000")
    assert rule.counts["http://router:4000"] == UNHELD_IN_A_ROW
