"""The ``cli-agent`` executor (:mod:`._executor`) and the coding-agent CLIs it runs, one module each: how each is
called and how its stream is read. :mod:`._process` runs one agent under its supervisor; :mod:`._classify` tells a
failure that is not the work's from one that is."""

from stepline.executors.cli_agents._executor import AGENTS, CliAgentExecutor
from stepline.executors.cli_agents._process import remove_private_folders, stop_left_over
from stepline.executors.cli_agents._prompt import build_prompt, describe_output
from stepline.executors.cli_agents._spec import (
    CALL,
    SESSION,
    AgentCli,
    AgentReport,
    Invocation,
    Reported,
    StreamedUsage,
)

__all__ = ["AGENTS", "CALL", "SESSION", "AgentCli", "AgentReport", "CliAgentExecutor", "Invocation", "Reported",
           "StreamedUsage", "build_prompt", "describe_output", "remove_private_folders", "stop_left_over"]
