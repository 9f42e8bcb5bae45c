"""Gemini CLI's adapter (see :mod:`cogd.clients`)."""

from cogd.clients import GEMINI, Adapter, _short


# Gemini tools whose answer (llmContent) names the files they found: glob, grep (both names).
_GEMINI_LISTINGS = ("glob", "search_file_content", "grep_search")


class Gemini(Adapter):
    """Gemini CLI: snake_case payloads like Claude Code's; context on SessionStart and
    BeforeAgent as hookSpecificOutput.additionalContext; stdout must be JSON or nothing."""

    name = GEMINI
    native = {"session-start": "SessionStart", "prompt-submit": "BeforeAgent"}
    project_env = "GEMINI_PROJECT_DIR"

    def tool(self, payload: dict) -> dict:
        slim = dict(payload)
        tool_input = payload.get("tool_input")
        if isinstance(tool_input, dict):  # replace's new_string locates the edit's lines
            slim["tool_input"] = {k: _short(v) if k == "new_string" else v
                                  for k, v in tool_input.items() if k not in ("content", "old_string")}
        response = payload.get("tool_response")
        if isinstance(response, dict):  # llmContent is a file's or a command's output: kept only for searches
            listed = payload.get("tool_name") in _GEMINI_LISTINGS
            slim["tool_response"] = {k: _short(v) for k, v in response.items()
                                     if k == "error" or (listed and k == "llmContent")}
        return slim


ADAPTER = Gemini()
