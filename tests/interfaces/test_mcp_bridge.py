"""The bridge under the MCP tools (issue 29), in process: several requests served at once, each call routed by the
request id it names, and a question raised inside one request tied to it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fakes.sessions import RecordingSession
from stepline.errors import UsageError
from stepline.executors import StepRequest
from stepline.executors._mcp_bridge import StepBridge


def _request(step_id: str, layer: str | None = None) -> StepRequest:
    return StepRequest(kind="work", run_id="run-1", step_id=step_id, title=step_id,
                       context={"subagent": layer} if layer else {})


class AskingSession(RecordingSession):
    """A session whose ``ask`` goes to the person through the bridge, as the MCP server's human channel does."""

    def __init__(self, bridge: StepBridge) -> None:
        super().__init__()
        self.bridge = bridge

    async def ask(self, question: str, choices: list[str] | None = None) -> str:
        answer, _ = await self.bridge.ask_person(run_id="run-1", step_id="review", gate_id="ask:review/1",
                                                 question=question, choices=choices, menu=[])
        self.calls.append(("ask", question, answer))
        return answer


def test_parallel_requests_are_routed_by_their_ids_and_an_unnamed_call_is_refused() -> None:
    async def main() -> tuple[list[dict[str, Any]], str, RecordingSession, RecordingSession, list[dict[str, Any]]]:
        bridge = StepBridge()
        left, right = RecordingSession(), RecordingSession()
        served = [asyncio.ensure_future(bridge.serve(_request("review", "edge"), left)),
                  asyncio.ensure_future(bridge.serve(_request("review", "blind"), right))]
        await bridge.wait_until(lambda: len(bridge.pending()) == 2)
        both = bridge.pending()
        with pytest.raises(UsageError) as unnamed:
            await bridge.submit("set_var", {"name": "x", "value": 1})
        await bridge.submit("set_var", {"name": "seen", "value": "blind"}, request_id=both[1]["request_id"])
        await bridge.submit("finish", {"summary": "blind done"}, request_id=both[1]["request_id"])
        after = bridge.pending()
        await bridge.submit("finish", {"summary": "edge done"})  # one request waits: the id may be left out
        await asyncio.gather(*served)
        return both, str(unnamed.value), left, right, after

    both, unnamed, left, right, after = asyncio.run(main())
    assert [(r["request_id"], r["layer"], r["waiting_for"]) for r in both] == [("r1", "edge", "work"),
                                                                               ("r2", "blind", "work")]
    assert "2 requests are waiting (r1 (review, layer edge), r2 (review, layer blind))" in unnamed
    assert right.calls == [("set_var", "seen", "blind"), ("finish", None, "blind done")]
    assert left.calls == [("finish", None, "edge done")]
    assert [r["request_id"] for r in after] == ["r1"]


def test_a_question_asked_inside_a_request_is_its_own_and_holds_that_request_until_answered() -> None:
    async def main() -> tuple[str, dict[str, Any], list[str], AskingSession]:
        bridge = StepBridge()
        session = AskingSession(bridge)
        served = asyncio.ensure_future(bridge.serve(_request("review"), session))
        await bridge.wait_until(lambda: bool(bridge.pending()))
        said = await bridge.ask("Which colour?", ["red", "blue"])
        question = bridge.pending()[-1]
        refused = []
        for call in ({"request_id": "r1"}, {}):  # the asking request waits; unnamed, the question is meant
            with pytest.raises(UsageError) as error:
                await bridge.submit("write_output", {"content": "x"}, **call)
            refused.append(str(error.value))
        with pytest.raises(UsageError):
            bridge.answer("green")
        bridge.answer("BLUE")
        await bridge.wait_until(lambda: len(bridge.pending()) == 1)
        await bridge.submit("finish", {"summary": "asked"})
        await served
        return said, question, refused, session

    said, question, refused, session = asyncio.run(main())
    assert "waiting for the user's answer as request r2" in said
    assert (question["request_id"], question["asked_by"], question["choices"]) == ("r2", "r1", ["red", "blue"])
    assert "request r1 waits for the user's answer to 'Which colour?'" in refused[0]
    assert "request r2 is a question for the user" in refused[1]
    assert session.calls == [("ask", "Which colour?", "blue"), ("finish", None, "asked")]


@pytest.mark.parametrize(("hold_final", "told"), [(False, "call current_step"),
                                                   (True, "the step is done: end your turn")])
def test_finish_says_what_to_do_next_in_the_server_it_is_called_on(hold_final: bool, told: str) -> None:
    # The IDE server's agent goes on with current_step; a cli-agent's per-step server has no current_step, and
    # a real agent told to call it spent turns looking for it.
    async def main() -> dict[str, Any]:
        bridge = StepBridge(hold_final=hold_final)
        served = asyncio.ensure_future(bridge.serve(_request("build"), RecordingSession()))
        await bridge.wait_until(lambda: bool(bridge.pending()))
        result: dict[str, Any] = await bridge.submit("finish", {"summary": "built"})
        await served
        return result

    assert asyncio.run(main())["next"] == told
