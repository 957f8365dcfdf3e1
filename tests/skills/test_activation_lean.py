"""A skill's activation (issue 21): what the runtime has done — resolving the customization, the prepend and append
steps, the persistent facts, the config — is not sent; what is judgement (a persona, a greeting, a menu) is."""

from __future__ import annotations

from stepline.skills._host import activation_left as _activation_left

AGENT = """## On Activation

### Step 1: Resolve the Agent Block

Run: `uv run {project-root}/_bmad/scripts/resolve_customization.py --skill {skill-root} --key agent`

### Step 2: Execute Prepend Steps

Execute each entry in `{agent.activation_steps_prepend}` in order before proceeding.

### Step 3: Adopt Persona

Adopt the Sally / UX Designer identity established in the Overview.

### Step 4: Load Persistent Facts

Treat every entry in `{agent.persistent_facts}` as foundational context.

### Step 5: Load Config

Load config from `{project-root}/_bmad/bmm/config.yaml` and resolve the user's name.

### Step 6: Greet the User

Greet `{user_name}` warmly by name as Sally.
"""

NUMBERED = """## On Activation

1. Resolve customization: `uv run {project-root}/_bmad/scripts/resolve_customization.py --skill {skill-root}`.
2. Execute each entry in `{workflow.activation_steps_prepend}` in order.
3. Greet `{user_name}` in `{communication_language}` and stay in it for the whole run. Detect intent.

Execute each entry in `{workflow.activation_steps_append}` in order.

Activation is complete. If `activation_steps_prepend` or `activation_steps_append` were non-empty, confirm it.
"""

MECHANICS_ONLY = """## On Activation

### Step 1: Execute Prepend Steps

{workflow.activation_steps_prepend}

### Step 2: Load Persistent Facts

{workflow.persistent_facts}

### Step 3: Execute Append Steps

{workflow.activation_steps_append}
"""


def test_subsections_the_runtime_did_are_left_out_and_named() -> None:
    left, runtime = _activation_left(AGENT)
    assert "Adopt the Sally" in left and "Greet `{user_name}`" in left
    assert "resolve_customization" not in left and "persistent_facts" not in left and "config.yaml" not in left
    assert runtime == ["### Step 1: Resolve the Agent Block", "### Step 2: Execute Prepend Steps",
                       "### Step 4: Load Persistent Facts", "### Step 5: Load Config"]


def test_numbered_items_and_paragraphs_too() -> None:
    left, runtime = _activation_left(NUMBERED)
    assert left.startswith("3. Greet `{user_name}`") and "Detect intent." in left
    assert len(runtime) == 4 and "activation_steps" not in left


def test_an_activation_of_mechanics_only_leaves_nothing_to_send() -> None:
    left, runtime = _activation_left(MECHANICS_ONLY)
    assert left == "" and len(runtime) == 3
