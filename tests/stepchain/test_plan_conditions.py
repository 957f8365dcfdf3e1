"""The condition a point of a skill's prose is under, read for the format (stepchain._plan): what makes a point
conditional (a case an arrow names, a question the text puts to itself, a bold case lead-in, an inner ``if …,``),
and what does not (a step's bold title, ``unless`` — asked by default —, a clause that only says when in the flow).
A wrong condition makes the runtime pass a point silently (or ask one the text does not give), so each shape is
pinned here."""

from __future__ import annotations

from pathlib import Path

from stepline.skills._points import _intent_of_section
from stepline.skills._skill import read_skill_files
from stepline.stepchain._conditions import attendance_fact
from stepline.stepchain._plan import Point, PointKind, read_points


def _points(text: str, tmp_path: Path) -> tuple[Point, ...]:
    doc = tmp_path / "SKILL.md"
    doc.write_text(text, encoding="utf-8")
    (tmp_path / "references").mkdir(exist_ok=True)
    for name in ("headless.md", "mode-a.md", "mode-b.md", "resume.md", "finalize.md"):
        (tmp_path / "references" / name).write_text("# x\n", encoding="utf-8")
    return read_points(text, file=doc, base=tmp_path, sections=("Converging", "Wrap-Up"))


def _only(points: tuple[Point, ...], kind: PointKind) -> Point:
    (point,) = [p for p in points if p.kind is kind]
    return point


def test_a_steps_bold_title_is_no_condition(tmp_path: Path) -> None:
    """``**Welcome the user:** … Then ask …``: the title names the step, not a case; the question always applies."""
    text = "6. **Welcome the user:** show who's in the room. Then ask what they want to get into.\n"
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition is None


def test_a_bold_case_lead_in_is_a_condition(tmp_path: Path) -> None:
    """``**Resolver missing or fails:**``, a value (``**`auto`** —``, ``**bad_spec** —``) and a lettered path
    (``**a) One-shot** —``, with the paragraph that goes on with it) are cases."""
    text = ("- **Resolver missing or fails:** ask the user which file to use.\n"
            "- **`auto`** — Load `references/mode-a.md`.\n"
            "- **bad_spec** — Read fully and follow `references/mode-b.md`.\n\n"
            "**a) One-shot** — zero blast radius.\n\n"
            "**EARLY EXIT** → `references/resume.md`\n")
    points = _points(text, tmp_path)
    assert _only(points, PointKind.QUESTION).condition == "Resolver missing or fails"
    routes = {p.target: p.condition for p in points if p.kind is PointKind.ROUTE}
    assert routes == {"references/mode-a.md": "auto", "references/mode-b.md": "bad_spec",
                      "references/resume.md": "a) One-shot"}


def test_unless_asks_by_default(tmp_path: Path) -> None:
    for text in ("Then ask what they want to get into, unless it's already obvious from how the skill was launched.\n",
                 "Unless the user already said, ask whether this party should remember across sessions.\n"):
        assert _only(_points(text, tmp_path), PointKind.QUESTION).condition is None, text


def test_an_arrow_names_the_case_it_leads_from(tmp_path: Path) -> None:
    """``Headless (no interactive user) → follow …``, each ``Mode → file`` of a list, ``(unknown id -> … ask)``."""
    text = ("3. Headless (no interactive user) → follow `references/headless.md` for the whole run.\n"
            "Once the stance is known, load its frame — Facilitator → `references/mode-a.md`, Creative Partner → "
            "`references/mode-b.md`.\n"
            "`--party <id>` overrides the default party (unknown id -> show the available names and ask).\n")
    points = _points(text, tmp_path)
    routes = {p.target: p.condition for p in points if p.kind is PointKind.ROUTE}
    assert routes == {"references/headless.md": "Headless (no interactive user)",
                      "references/mode-a.md": "Facilitator", "references/mode-b.md": "Creative Partner"}
    assert _only(points, PointKind.QUESTION).condition == "unknown id"


def test_a_flow_of_steps_is_no_case(tmp_path: Path) -> None:
    """``**EARLY EXIT** → file`` is an instruction, ``Step 2 → Step 3`` a flow: neither is a condition."""
    text = "Set `spec_file`. **EARLY EXIT** → `references/resume.md`\n"
    assert _only(_points(text, tmp_path), PointKind.ROUTE).condition is None


def test_a_question_the_text_puts_to_itself_is_the_case(tmp_path: Path) -> None:
    text = ("- **It reads like people talking.** Short turns.\n"
            "- A flat turn? Move on. Drifting into Q&A or going in circles? Bring in a new voice, or ask where they "
            "want to take it.\n")
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition == "Drifting into Q&A or going in circles"


def test_a_bold_title_opening_with_a_condition_governs_its_item(tmp_path: Path) -> None:
    text = "- **When it sags, change something — don't force it.** Bring in a new voice or ask where to go.\n"
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition == "When it sags"


def test_an_item_opening_with_if_colon_governs_its_later_sentences(tmp_path: Path) -> None:
    text = "- If `draft` selected: Set `spec_file`. Run the resolution. **EARLY EXIT** → `references/resume.md`\n"
    assert _only(_points(text, tmp_path), PointKind.ROUTE).condition == "If `draft` selected"


def test_an_inner_if_clause_conditions_the_route_after_it(tmp_path: Path) -> None:
    text = ("Then continue per the mode's frame — or, if they're ready to land it, go to Wrap-Up "
            "(`references/finalize.md`).\n")
    assert _only(_points(text, tmp_path), PointKind.ROUTE).condition == "if they're ready to land it"


def test_when_in_the_flow_is_no_condition(tmp_path: Path) -> None:
    """``Once chosen,`` / ``When the batch is spent,`` say when, not whether: the point is asked."""
    for text in ("Once chosen, ask which entry point fits.\n",
                 "When the batch is spent, offer three paths: run another batch, converge, or wrap up.\n"):
        points = [p for p in _points(text, tmp_path) if p.kind in (PointKind.QUESTION, PointKind.CHOICE)]
        assert [p.condition for p in points] == [None], text
    text = "When the user is ready to decide, ask which idea to take forward.\n"
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition == "When the user is ready to decide"


def test_a_mode_named_in_bold_is_the_case(tmp_path: Path) -> None:
    text = "In **Facilitator** and **Creative Partner**, every artifact is opt-in, so ask what they want.\n"
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition == "In Facilitator and Creative Partner"


def test_a_gerund_case_label_conditions_its_route(tmp_path: Path) -> None:
    text = "Picking up an existing session instead of starting fresh: load `references/resume.md` and follow it.\n"
    assert _only(_points(text, tmp_path), PointKind.ROUTE).condition == \
        "Picking up an existing session instead of starting fresh"


def test_routes_a_choices_options_name_are_under_that_option(tmp_path: Path) -> None:
    """The sections an offered path leads to are taken when that path is chosen, after the choice."""
    text = ("When the batch is spent, offer three paths: run another batch, **converge** to narrow and decide "
            "(`## Converging`), or wrap up (`## Wrap-Up`).\n")
    points = _points(text, tmp_path)
    assert [p.kind for p in points] == [PointKind.CHOICE, PointKind.ROUTE, PointKind.ROUTE]
    assert [p.condition for p in points[1:]] == ["converge to narrow and decide chosen", "wrap up chosen"]


def test_a_handover_offered_as_an_alternative_is_conditional(tmp_path: Path) -> None:
    text = "Next, lead with `bmad-spec`, then `bmad-build`; or invoke `bmad-help` to route.\n"
    assert _only(_points(text, tmp_path), PointKind.HANDOVER).condition is not None


def test_paste_it_back_hands_the_turn_over(tmp_path: Path) -> None:
    text = 'Try to open it, then say: *"Compose your session, click **Copy prompt**, and paste the result back."*\n'
    assert [p.kind for p in _points(text, tmp_path)] == [PointKind.QUESTION]


def test_a_section_of_another_intent_than_the_default_is_under_it(tmp_path: Path) -> None:
    (tmp_path / "SKILL.md").write_text(
        "---\nname: x\ndescription: d\n---\n\n## On Activation\n\n"
        "3. Detect the intent — **create** (the default), **update** an existing spine, or **validate** one.\n\n"
        "## Finalize\n\nWrite it.\n\n## Update\n\nAmend it.\n\n## Validate\n\nCritique it.\n", encoding="utf-8")
    files = read_skill_files(tmp_path)
    assert [_intent_of_section(files, t) for t in ("Finalize", "Update", "Validate")] == [None, "update", "validate"]


def test_whether_a_person_takes_part_is_read_from_the_run() -> None:
    """Normal mode has a person answering: ``If launched headless`` does not hold, ``Otherwise (interactive)``
    does; a condition that adds prose decides only when the attendance part fails."""
    assert attendance_fact("If launched headless", attended=True) is not None
    assert attendance_fact("If launched headless", attended=True)[0] is False  # type: ignore[index]
    assert attendance_fact("Otherwise (interactive)", attended=True)[0] is True  # type: ignore[index]
    assert attendance_fact("Headless (no interactive user)", attended=False)[0] is True  # type: ignore[index]
    assert attendance_fact("If interactive and unclear", attended=True) is None
    assert attendance_fact("If interactive and unclear", attended=False)[0] is False  # type: ignore[index]
    assert attendance_fact("If the file is missing", attended=True) is None


def test_only_when_is_the_condition(tmp_path: Path) -> None:
    text = "Only pause to clarify when two or more items are genuinely close — one short question.\n"
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition == "two or more items are genuinely close"


def test_a_condition_after_the_cue_in_its_clause(tmp_path: Path) -> None:
    """``offer concrete alternatives when the user is stuck``; ``Ask the user if …`` is what it asks, no case."""
    text = "Be direct, but offer concrete alternatives when the user is stuck — tough love.\n"
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition == "the user is stuck"
    text = "Ask the user if there are any other documents to include, and if anything should be excluded.\n"
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition is None


def test_items_under_a_lead_in_with_a_condition(tmp_path: Path) -> None:
    """Every item of a list under ``… If overlap is significant:`` is under it, a blank line between or not."""
    text = ("Assess whether epics overlap. If overlap is significant:\n\n"
            "- Distinguish meaningful overlap from incidental sharing\n"
            "- Ask whether to consolidate into one epic\n")
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition == "If overlap is significant:"


def test_a_bold_label_between_a_lead_in_and_its_list_keeps_the_lead_ins_condition(tmp_path: Path) -> None:
    """alpha.23's step-01-init: ``If the document exists …:`` then ``**Continuation Protocol:**`` then the list
    whose ``**STOP immediately** and load `./step-01b-continue.md``` is only for a continuation; a fresh run goes on
    to its question. A bold label that follows no lead-in states no case."""
    text = ("### 2. Handle Continuation (If Document Exists)\n\n"
            "If the document exists and has frontmatter with `stepsCompleted`:\n\n"
            "**Continuation Protocol:**\n\n"
            "- **STOP immediately** and load `./references/resume.md`\n"
            "- Do not proceed with any initialization tasks\n\n"
            "### 3. Fresh Workflow Setup\n\n"
            "Discover the documents.\n\n"
            "**Discovery:**\n\n"
            "- Ask the user which of them to load\n")
    points = _points(text, tmp_path)
    route = _only(points, PointKind.ROUTE)
    assert route.condition == "If the document exists and has frontmatter with `stepsCompleted`:"
    assert _only(points, PointKind.QUESTION).condition is None


def test_an_items_opening_if_comma_governs_its_later_sentences(tmp_path: Path) -> None:
    text = ("4. If the new file does not exist, tell the user and offer to rename it. Rename it only after explicit "
            "approval.\n5. If it exists, read both. Resolve conflicting values with the user.\n")
    points = [p for p in _points(text, tmp_path) if p.kind is not PointKind.ROUTE]
    assert [p.condition for p in points] == ["If the new file does not exist"] * 2 + ["If it exists"]


def test_otherwise_is_not_under_the_lines_if(tmp_path: Path) -> None:
    text = "1. If headless, follow `references/headless.md`. Otherwise ask what they want to build.\n"
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition == "Otherwise"


def test_an_offer_to_resume_is_under_there_being_a_run(tmp_path: Path) -> None:
    text = "Scan the output folder for prior runs and offer to resume rather than starting over.\n"
    assert _only(_points(text, tmp_path), PointKind.CONFIRM).condition == "there is an unfinished run to resume"


def test_an_optional_section_is_under_its_title(tmp_path: Path) -> None:
    text = "## Story Breakdown (optional)\n\nWalk the capabilities with the user and propose stories.\n"
    assert _only(_points(text, tmp_path), PointKind.QUESTION).condition == "Story Breakdown (optional)"


def test_a_reference_file_name_does_not_end_a_condition(tmp_path: Path) -> None:
    text = ("When the user points the skill at an existing spec folder (or its SPEC.md) with no change signal, offer "
            "to review the open questions.\n")
    assert _only(_points(text, tmp_path), PointKind.CONFIRM).condition is not None


def test_a_leading_condition_keeps_its_parenthesis_whole(tmp_path: Path) -> None:
    """party mode's ``If they want to create or configure a saved party setup (invent a cast, add a persona, …),
    load …``: the commas inside the parenthesis do not end the condition (cut there, it named half a case, and every
    point of the routed file carried that half)."""
    text = ("3. **Detect intent and route.** If they want to create or configure a saved party setup (invent a cast, "
            "add a persona, or set a default), load `references/resume.md` and follow it. Otherwise run a party.\n")
    route = _only(_points(text, tmp_path), PointKind.ROUTE)
    assert route.condition == ("If they want to create or configure a saved party setup (invent a cast, add a "
                               "persona, or set a default)")


def test_a_flow_under_a_mode_that_is_not_the_default_is_under_that_mode(tmp_path: Path) -> None:
    """CCW's ``### Plan Mode (default)`` … ``### Verify Mode``: the Verify flow's phase is read only in that mode;
    the default mode's flow always applies."""
    (tmp_path / "phases").mkdir()
    for name in ("01-plan.md", "05-verify.md"):
        (tmp_path / "phases" / name).write_text("# x\n", encoding="utf-8")
    text = ("## Execution Flow\n\n### Plan Mode (default)\n\n```\nPhase 1: Plan\n"
            "   └─ Ref: Read(\"phases/01-plan.md\")\n```\n\n"
            "### Verify Mode\n\n```\nPhase 5: Verify\n   └─ Ref: Read(\"phases/05-verify.md\")\n```\n")
    doc = tmp_path / "SKILL.md"
    doc.write_text(text, encoding="utf-8")
    routes = {p.target: p.condition for p in read_points(text, file=doc, base=tmp_path) if p.kind is PointKind.ROUTE}
    assert routes == {"phases/01-plan.md": None, "phases/05-verify.md": "Verify Mode"}


def test_a_routed_file_reached_by_a_route_that_always_applies_is_under_no_condition(tmp_path: Path) -> None:
    """prfaq reaches press-release.md from its headless case and from its interactive path: the file's points are
    the person's in an interactive run (not under ``--headless``); a file reached only from a case stays under it."""
    from stepline.families import read_plan

    skill = tmp_path / "bmad-x"
    (skill / "references").mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: bmad-x\ndescription: test skill\n---\n\n# X\n\n## Setup\n\n"
        "- `--headless` / `-H`: draft it all, then route to `./references/draft.md`.\n"
        "- If the user is in a hurry, route to `./references/fast.md`.\n\n"
        "## Ignition\n\nAsk the user what the product is.\n\n"
        "When you have enough, route to `./references/draft.md`.\n", encoding="utf-8")
    (skill / "references" / "draft.md").write_text("# Draft\n\nAsk the user for the headline.\n", encoding="utf-8")
    (skill / "references" / "fast.md").write_text("# Fast\n\nAsk the user for the date.\n", encoding="utf-8")
    plan = read_plan(skill, project_root=tmp_path)
    conditions = {s.id: [p.condition for p in s.points] for s in plan.steps if s.kind == "route"}
    assert conditions["route-references-draft"] == [None]
    assert conditions["route-references-fast"] == ["If the user is in a hurry"]


def test_a_leading_condition_runs_past_a_noun_that_spells_like_a_cue(tmp_path: Path) -> None:
    """``When the ask is bare research …, open the floor``: ``the ask`` is a noun inside the condition, not the
    point's cue (``If ambiguous ask the user`` still ends its condition at the verb)."""
    text = ("4. When the ask is bare research with no verb (\"research X for me\"), open the floor first.\n\n"
            "If ambiguous ask the user which file to use.\n")
    conditions = [p.condition for p in _points(text, tmp_path)]
    assert conditions == ['When the ask is bare research with no verb ("research X for me")', "If ambiguous"]


def test_an_approval_a_permission_requires_is_under_the_permission(tmp_path: Path) -> None:
    """``Rules … can go in a nested `AGENTS.md` there — but only when they are substantial, the user approves it,
    and …``: the person approves only when the permission is used. A gate on the flow itself (``You can proceed
    only after the user approves``, ``Proceed only after the user confirms``) always applies."""
    text = ("Rules bounded to a directory can go in a nested `AGENTS.md` there, attached by location — but only "
            "when they are substantial, the split reduces the root block, the user approves it, and loading is "
            "verified.\n\nYou can proceed only after the user approves the plan.\n\n"
            "Proceed only after the user confirms.\n")
    points = _points(text, tmp_path)
    assert [(p.kind.value, p.condition) for p in points] == [
        ("confirm", "Rules bounded to a directory can go in a nested `AGENTS.md` there"),
        ("confirm", None), ("confirm", None)]


def test_a_bold_lead_in_whose_aside_gives_a_value_is_a_case(tmp_path: Path) -> None:
    """``**Template swap** (`*_template` scalar): offer to copy …`` and ``**Standalone Mode** (no story):`` are
    cases (the aside names the value or the case); ``**Analyzer** (`./agents/analyzer.md`) —`` describes a part.
    An arrow inside an aside closed before the point (``(policy → team, personal → user), confirm before
    writing``) is no case of the point."""
    text = ("**Template swap** (`*_template` scalar): offer to copy the default template.\n\n"
            "**Standalone Mode** (no story): ask the user which files to test.\n\n"
            "- **Analyzer** (`./agents/analyzer.md`) — ask the user which folders to scan.\n\n"
            "Default by character (policy → team, personal → user), confirm before writing.\n")
    points = _points(text, tmp_path)
    assert [(p.kind.value, p.condition) for p in points] == [
        ("confirm", "Template swap"), ("question", "Standalone Mode"), ("question", None), ("confirm", None)]


def test_an_options_item_that_asks_more_is_under_that_option_once(tmp_path: Path) -> None:
    """``- **Coaching path** — … Once chosen, I ask which entry point fits: **a** (…) or **b**``: the question is
    the option's, its condition said once (the item and its bold lead-in both name the option)."""
    text = ("**Working mode.** Offer the choice in the user's language:\n\n"
            "- **Fast path** — I draft the full PRD.\n"
            "- **Coaching path** — we walk the sections together. Once chosen, I ask which entry point fits: "
            "**Vision + Features** (capability-first) or **Journey-led** (user-first).\n")
    points = _points(text, tmp_path)
    assert [(len(p.options), p.condition) for p in points] == [(2, None), (2, "Coaching path chosen")]
