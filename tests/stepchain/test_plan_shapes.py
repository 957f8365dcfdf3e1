"""The shapes a skill's prose hands the turn to the person in, each read into its point (stepchain._plan)."""

from __future__ import annotations

from pathlib import Path

from stepline.stepchain._plan import Point, PointKind, read_points


def _points(text: str, tmp_path: Path, **kw: object) -> tuple[Point, ...]:
    doc = tmp_path / "SKILL.md"
    doc.write_text(text, encoding="utf-8")
    return read_points(text, file=doc, base=tmp_path, **kw)  # type: ignore[arg-type]


def _kinds(points: tuple[Point, ...]) -> list[str]:
    return [p.kind.value for p in points]


def test_conditional_menus_are_kept_apart_each_with_its_condition(tmp_path: Path) -> None:
    """Two menus under two conditions are two choices, never one merged menu."""
    text = ("## 4. Menu\n\n"
            "If existing session files are found:\n"
            "  [1] Continue the session\n"
            "  [2] Start over\n\n"
            "Otherwise:\n"
            "  [A] Advanced Elicitation\n"
            "  [C] Continue\n")
    points = _points(text, tmp_path)
    choices = [p for p in points if p.kind is PointKind.CHOICE]
    assert [[o.key for o in p.options] for p in choices] == [["1", "2"], ["A", "C"]]
    assert choices[0].condition == "If existing session files are found:"
    assert choices[1].condition == "Otherwise:"


def test_a_range_stands_for_each_number(tmp_path: Path) -> None:
    """``Enter 1-4`` after a numbered list offers the four, labelled from the list."""
    text = ("Pick a category:\n\n1. Structured\n2. Creative\n3. Deep\n4. Wild\n\n"
            "**Which category interests you most? Enter 1-4.**\n\nHALT — wait for user selection.\n")
    choices = [p for p in _points(text, tmp_path) if p.kind is PointKind.CHOICE]
    assert [(o.key, o.label) for o in choices[-1].options] == [("1", "Structured"), ("2", "Creative"),
                                                              ("3", "Deep"), ("4", "Wild")]


def test_prose_with_brackets_yields_no_options(tmp_path: Path) -> None:
    """A YAML list or an index in prose is no menu: ``[1] and documentCounts`` offers nothing."""
    text = "Update `stepsCompleted: [1]` and documentCounts in the frontmatter, then continue.\n"
    assert [p for p in _points(text, tmp_path) if p.options] == []


def test_free_text_question_with_its_condition(tmp_path: Path) -> None:
    points = _points("Detect intent: create, update or validate. If ambiguous, ask.\n", tmp_path)
    assert _kinds(points) == ["question"]
    assert points[0].condition == "If ambiguous"


def test_a_conversation_loop_records_what_ends_it(tmp_path: Path) -> None:
    points = _points("Keep asking follow-up questions until the user says they're done.\n", tmp_path)
    assert _kinds(points) == ["loop"]
    assert points[0].ends_when == "the user says they're done"


def test_offered_choice_lists_its_bold_options(tmp_path: Path) -> None:
    text = ("**Working mode.** Offer the choice in the user's language:\n\n"
            "- **Fast path** — I batch the gaps.\n- **Coaching path** — we walk the sections.\n")
    points = _points(text, tmp_path)
    assert _kinds(points) == ["choice"]
    assert [(o.key, o.label) for o in points[0].options] == [("F", "Fast path"), ("C", "Coaching path")]


def test_confirmation(tmp_path: Path) -> None:
    assert _kinds(_points("1. Show the full TOML.\n2. Wait for explicit yes.\n3. Write.\n", tmp_path)) == ["confirm"]


def test_forwarding_shims_in_several_wordings(tmp_path: Path) -> None:
    """Every wording a release has used to hand over to another skill."""
    for text in ("This skill was consolidated into `bmad-prd`.\n",
                 "Invoke `bmad-prd` with the following context.\n",
                 "Merged into `bmad-review`. Invoke the `bmad-review` skill on the same content.\n",
                 "Then invoke `bmad-project-context` with **setup** intent. It takes the workflow from here.\n",
                 "`bmad-sprint-planning` takes the workflow from here.\n",
                 "This skill now forwards to bmad-build-auto.\n"):
        points = _points(text, tmp_path)
        assert [p.kind for p in points] == [PointKind.HANDOVER], text
        assert points[0].target and points[0].target.startswith("bmad-")


def test_advice_naming_a_skill_is_no_handover(tmp_path: Path) -> None:
    text = ("Let the user know that at any point they can invoke `bmad-party-mode`. "
            "New work should invoke `bmad-prd` directly.\n")
    assert _kinds(_points(text, tmp_path)) == []


def test_route_resolved_and_unresolved(tmp_path: Path) -> None:
    (tmp_path / "references").mkdir()
    (tmp_path / "references" / "press-release.md").write_text("# PR\n", encoding="utf-8")
    points = _points("Then route to `./references/press-release.md`. Load `prompts/missing.md` next.\n", tmp_path)
    assert [(p.kind.value, p.target, p.unresolved) for p in points] == [
        ("route", "./references/press-release.md", False), ("route", "prompts/missing.md", True)]


def test_ask_user_question_block_is_a_choice_with_its_options(tmp_path: Path) -> None:
    text = ("```javascript\nconst autoYes = /\\b(-y|--yes)\\b/.test($ARGUMENTS)\n"
            "if (autoYes) {\n  prefs = {}\n} else {\n"
            "  const r = AskUserQuestion({\n    questions: [{\n      question: \"Skip confirmations?\",\n"
            "      header: \"Auto Mode\",\n      multiSelect: false,\n      options: [\n"
            "        { label: \"Interactive (Recommended)\", description: \"ask\" },\n"
            "        { label: \"Auto\", description: \"skip\" }\n      ]\n    }]\n  })\n}\n```\n")
    points = _points(text, tmp_path)
    assert _kinds(points) == ["choice"]
    assert [o.label for o in points[0].options] == ["Interactive (Recommended)", "Auto"]
    assert points[0].default == "1" and points[0].auto is not None


def test_execution_flow_phases_are_routes(tmp_path: Path) -> None:
    (tmp_path / "phases").mkdir()
    for name in ("01-discovery.md", "02-context.md"):
        (tmp_path / "phases" / name).write_text("# phase\n", encoding="utf-8")
    text = ("## Execution Flow\n\n```\nPhase 1: Discovery\n   └─ Ref: Read(\"phases/01-discovery.md\")\n"
            "Phase 2: Context\n   └─ Ref: Read(\"phases/02-context.md\")\n```\n")
    points = _points(text, tmp_path)
    assert [(p.kind.value, p.target) for p in points] == [("route", "phases/01-discovery.md"),
                                                         ("route", "phases/02-context.md")]
    assert all(p.resolved is not None for p in points)


def test_a_point_survives_json(tmp_path: Path) -> None:
    points = _points("**Working mode.** Offer the choice:\n\n- **Fast** — a\n- **Slow** — b\n", tmp_path)
    assert Point.from_json(points[0].to_json()) == points[0]


def test_a_menu_shown_as_a_fenced_block_keeps_every_option(tmp_path: Path) -> None:
    """``#### Display Format`` then a block of ``1.``–``5.``, ``r.``, ``a.``, ``x.`` lines: eight options, the five
    methods included (they were dropped)."""
    text = ("#### Display Format\n\n```\n**Advanced Elicitation Options**\n"
            "Choose a number (1-5), [r] to Reshuffle, [a] List All, or [x] to Proceed:\n\n"
            + "".join(f"{n}. [Method Name]\n" for n in range(1, 6))
            + "r. Reshuffle the list\na. List all methods\nx. Proceed / No Further Actions\n```\n")
    choices = [p for p in _points(text, tmp_path) if p.kind is PointKind.CHOICE]
    assert len(choices) == 1
    assert [o.key for o in choices[0].options] == ["1", "2", "3", "4", "5", "r", "a", "x"]


def test_an_options_handler_line_offers_no_option(tmp_path: Path) -> None:
    """``If user selects **[1]** (continue): …`` says what option 1 does; the menu above is the only choice."""
    text = ("Ask the user:\n\n**[1]** Continue this session\n**[2]** Start a new session\n\n"
            "- If user selects **[1]** (continue): load `./step-01b-continue.md`\n"
            "- If user selects **[2]** (new): proceed\n")
    choices = [p for p in _points(text, tmp_path) if p.kind is PointKind.CHOICE]
    assert [[o.label for o in c.options] for c in choices] == [["Continue this session", "Start a new session"]]


def test_a_checkpoint_with_backticked_options_is_a_choice(tmp_path: Path) -> None:
    points = _points("HALT and ask human: `[A] Approve` | `[E] Edit`\n", tmp_path)
    assert [(p.kind.value, [(o.key, o.label) for o in p.options]) for p in points] == [
        ("choice", [("A", "Approve"), ("E", "Edit")])]


def test_negated_and_described_turns_are_no_points(tmp_path: Path) -> None:
    text = ("Never ask what a scan could answer. Do not ask. User can chat or ask questions at any time. "
            "Asking the user to confirm a path-checked claim is a defect.\n")
    assert _points(text, tmp_path) == ()


def test_a_working_session_with_the_person_is_asked(tmp_path: Path) -> None:
    """``Walk `.memlog.md` with the user``, ``open the floor``, ``invite the user to sharpen it``, ``paste it
    back`` hand the turn over (free text)."""
    for text in ("1. **Memlog audit.** Walk `.memlog.md` with the user; each entry captured or set aside.\n",
                 "Open the floor before any structured questions.\n",
                 "Draft each section yourself, then challenge it before inviting the user to sharpen it.\n"):
        assert _kinds(_points(text, tmp_path)) == ["question"], text


def test_what_is_not_a_turn(tmp_path: Path) -> None:
    """A question to ask as a noun, a criterion a human confirms, a restriction on asking, a subagent's own
    confirmation, a prompt as a noun."""
    for text in ("A surprising scan finding is a question to ask, not a line to write.\n",
                 "- **Runtime behavior invisible from the repo** — environment quirks — once a human confirms it.\n",
                 "Read what exists first; ask only what is missing.\n",
                 "Build a deep-research prompt the user runs themselves.\n",
                 "Re-check every caveat and ask of every line whether removing it would change behavior.\n"):
        assert _points(text, tmp_path) == (), text
    text = "User confirms which apply or adds others; subagent-extracts on confirm.\n"
    assert _kinds(_points(text, tmp_path)) == ["confirm"]


def test_a_question_and_its_wait_are_one_turn(tmp_path: Path) -> None:
    text = "Before proceeding, ask the user if there are other documents to include. Wait for user confirmation.\n"
    assert _kinds(_points(text, tmp_path)) == ["question"]


def test_asks_inside_what_is_displayed_at_once_are_one_turn(tmp_path: Path) -> None:
    text = ("### 8. Present\n\nDisplay to user:\n\n- Show count of FRs found\n- Ask if any FRs are missing\n\n"
            "### 9. Get User Confirmation\n\nAsk: \"Do these requirements represent what needs to be built?\"\n")
    points = _points(text, tmp_path)
    assert _kinds(points) == ["question"] and points[0].line == 10


def test_inline_options_of_a_choice(tmp_path: Path) -> None:
    """``Per finding: a, b, c, or d.``; ``let the user pick all / a subset / none``; ``put the choice up front:
    **Run** it here, or **Draft** a prompt``; a menu only some runs get carries its case."""
    cases = {"Per finding: autofix, discuss, defer to open items, or ignore.\n":
             ["autofix", "discuss", "defer to open items", "ignore"],
             "Present the lens menu and let the user pick all / a subset / none.\n": ["all", "a subset", "none"],
             "Then put the choice up front, once: **Run** it here now, or **Draft** a prompt for a tool.\n":
             ["Run", "Draft"]}
    for text, labels in cases.items():
        points = _points(text, tmp_path)
        assert _kinds(points) == ["choice"] and [o.label for o in points[0].options] == labels, text
    text = "Stakes-calibrated — hobby/solo may skip; higher stakes get the explicit all/subset/skip menu.\n"
    assert [p.condition for p in _points(text, tmp_path)] == ["higher stakes"]


def test_a_halt_that_waits_for_the_choice_above_it_is_no_menu_of_its_own(tmp_path: Path) -> None:
    """code-review's last section: ``Present the user with follow-up options:`` a numbered list, then ``**HALT** — I
    am waiting for your choice.``: the choice is the point the person answers, once; the halt is its wait, not a
    ``[C] Continue`` menu after it. A halt under another heading than the point still gates the step's end."""
    from stepline.stepchain._read import halt_menu, halts_in, prose_lines

    text = ("### 6. Sync\n\nSave the file.\n\n"
            "### 7. Next steps\n\nPresent the user with follow-up options:\n\n"
            "> 1. **Start the next story** — run `dev-story`\n> 2. **Re-run code review** — review again\n"
            "> 3. **Done** — end the workflow\n\n"
            "**HALT** — I am waiting for your choice. Do not proceed until the user selects an option.\n")
    points = [p.to_json() for p in _points(text, tmp_path)]
    assert [(p["kind"], p["line"]) for p in points] == [("choice", 7)]
    halts = [h.as_meta() for h in halts_in(prose_lines(text, 1))]
    assert [h["line"] for h in halts] == [13]
    assert halt_menu(halts, points) == []
    moved = [{**p, "line": 2} for p in points]  # the same choice under the heading before the halt's
    assert [o["key"] for o in halt_menu(halts, moved)] == ["C"]


def test_a_section_that_sets_a_standard_held_throughout_gives_no_points(tmp_path: Path) -> None:
    """party mode's ``## Keep It Feeling Like a Party`` — ``This is the bar — strive for every one of these, every
    round`` — is how every round should feel, not a step: its ``When it sags, … or ask where they want to take it``
    is one of the orchestrator's moves, no conditional question. A section that opens with work still asks."""
    text = ("## Keep It Lively\n\nThis is the bar — strive for every one of these, every round:\n\n"
            "- **When it sags, change something.** Drifting? Bring in a new voice, or ask where they want to take it.\n"
            "- **Pull the user into the room.** Characters put a question back to them.\n\n"
            "## Wrap Up\n\nRead back the takeaways, then ask the user what to keep.\n")
    points = _points(text, tmp_path)
    assert [(p.kind, p.line, p.condition) for p in points] == [(PointKind.QUESTION, 10, None)]


def test_a_skill_named_in_a_sentence_of_advice_is_no_hand_over(tmp_path: Path) -> None:
    """bmad-prd's Close: ``Common next: `bmad-ux`, `bmad-architecture`; invoke `bmad-help` for authoritative
    routing.`` suggests what the person may run next (the label covers the whole sentence, past its ``;``); a
    sentence that says to invoke it is a hand-over."""
    advice = "7. **Close.** Share paths. Common next: `bmad-ux`, `bmad-arch`; invoke `bmad-help` for routing.\n"
    assert [p for p in _points(advice, tmp_path) if p.kind is PointKind.HANDOVER] == []
    told = "7. **Close.** Share artifact paths. Invoke the `bmad-help` skill.\n"
    assert [p.target for p in _points(told, tmp_path) if p.kind is PointKind.HANDOVER] == ["bmad-help"]


def test_a_quotation_handed_to_a_subagent_is_no_turn(tmp_path: Path) -> None:
    """The words a step hands a subagent to carry (``spawn one per lens; give it … the constraint "…"``) are its
    orders, not the person's turn, however many sentences the quotation runs to; a quotation said to the person
    (``Ask: "…"``) is still a question."""
    text = ("5. **Run the lenses.** When subagents are available, spawn one per lens; give it the content path and "
            "the constraint \"Return ONLY your findings. Return them as text; do not route them through any tool "
            "the host may offer. Ask nothing of the user.\" Otherwise run the lenses yourself.\n"
            "6. Spawn them with the same constraint: \"Do not wait for confirmation. Offer no menu.\"\n"
            "7. Ask: \"Which lens should run first? Any areas to consider?\"\n")
    points = _points(text, tmp_path)
    assert [(p.kind.value, p.line) for p in points] == [("question", 3)]


def test_options_described_are_no_choice_unless_offered(tmp_path: Path) -> None:
    """A sentence that names a concept's values (``the **decision shape**: **explore** (…) or **select** (choose
    between candidates)``) offers nothing: an option's own gloss is no cue. ``choose: **express** (…) or
    **guided** (…)`` and ``Offer the mode: …`` still are choices."""
    text = ("Orthogonal to type is the **decision shape**: **explore** (the default — understand, assess) or "
            "**select** (choose between candidates).\n")
    assert _points(text, tmp_path) == ()
    for text in ("When input is sparse, choose: **express** (best-effort distill) or **guided** (walk the fields "
                 "with the user).\n",
                 "Offer the working mode: **Coaching path** (draft with them) or **Fast path** (you draft).\n"):
        (point,) = _points(text, tmp_path)
        assert point.kind is PointKind.CHOICE and len(point.options) == 2, text


def test_questions_the_text_counts_a_review_and_a_step_the_person_ends(tmp_path: Path) -> None:
    """``I batch the remaining gaps into one or two consolidated questions`` (an option's own turn, under it),
    ``present a draft for the user to review``, ``the user ends this step with an explicit accounting of …`` (a
    conversation the person ends)."""
    text = ("Offer the working mode:\n\n"
            "- **Fast path** — I batch the remaining gaps into one or two consolidated questions, then draft.\n"
            "- **Coaching path** — we draft section by section.\n\n"
            "1. Memlog audit: the user ends this step with an explicit accounting of how each entry was handled.\n"
            "2. Polish the draft, so we present a high-quality draft for the user to review and finalize.\n")
    points = _points(text, tmp_path)
    assert [(p.kind.value, p.condition) for p in points] == [
        ("choice", None), ("question", "Fast path chosen"), ("loop", None), ("question", None)]
    assert points[2].ends_when is not None and points[2].ends_when.startswith("the user ends this step")


def test_a_turn_named_as_a_noun_or_described_is_no_point(tmp_path: Path) -> None:
    """``the per-item evidence Phase 5's status offer reads`` (an offer as a noun), ``That record is exactly what
    Phase 5's offer reads: the evidence is what the user is asked to confirm`` (a turn taken elsewhere,
    described); ``offer them the list`` still is a turn."""
    text = ("Load the record for the rubric — the per-item evidence Phase 5's status offer reads.\n\n"
            "That record is exactly what Phase 5's `--set-action-status` offer reads: the selector becomes the JSON, "
            "the evidence is what the user is asked to confirm, and the status is written only if they confirm it.\n")
    assert _points(text, tmp_path) == ()
    assert _kinds(_points("Then offer them the list of open items.\n", tmp_path)) == ["question"]
