"""The scripted user: a deterministic turn list with conditional turns and reactive replies."""

from __future__ import annotations

from scenarios.scenario import ScriptedReply, ScriptedTurn, ScriptedUserConfig
from scenarios.users.base import User, UserReply, UserView


class ScriptedUser(User):
    """Says its turns in order; conditional turns depend on the agent's last message or tool calls.

    At each user turn, the first reply whose condition holds (and that has uses left) is said;
    otherwise the next turn: a turn whose `when` fails says its `otherwise` text, or is skipped.
    When the turns run out the user says `final` (by default the stop token).
    """

    name = "scripted"

    def __init__(
        self,
        turns: list[ScriptedTurn] | list[str],
        replies: list[ScriptedReply] | None = None,
        final: str = "###STOP###",
    ) -> None:
        self.turns = [ScriptedTurn(say=t) if isinstance(t, str) else t for t in turns]
        self.replies = list(replies or [])
        self.final = final
        self._next = 0
        self._used = [0] * len(self.replies)

    @classmethod
    def from_config(cls, config: ScriptedUserConfig) -> ScriptedUser:
        """A scripted user from its scenario config."""
        return cls(config.turns, config.replies, config.final)

    async def respond(self, view: UserView) -> UserReply:
        text, names = view.agent_text, view.tool_names
        for i, reply in enumerate(self.replies):
            if self._used[i] < reply.times and reply.when.holds(text, names):
                self._used[i] += 1
                return UserReply(reply.say, record={"scripted": f"reply[{i}]"})
        while self._next < len(self.turns):
            index = self._next
            turn = self.turns[index]
            self._next += 1
            if turn.when is None or turn.when.holds(text, names):
                return UserReply(turn.say, record={"scripted": f"turn[{index}]"})
            if turn.otherwise is not None:
                return UserReply(turn.otherwise, record={"scripted": f"turn[{index}].otherwise"})
        return UserReply(self.final, record={"scripted": "final"})
