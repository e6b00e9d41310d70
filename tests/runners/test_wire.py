"""The wire tap's checklist, from messages as the tap records them (no sockets).

The tap itself runs in every clients run (tests/system/test_client_verdicts.py checks that its
capture agrees with the lab's evidence); here, what it makes of message sequences.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp_lab.runners.wire import CLIENT, LAB, checklist, checklists, from_jsonl, messages_in

URI = "test://review/status"
V1 = "status: pending\nversion: 1\nmessage: x"
V2 = "status: reviewed\nversion: 2\nmessage: x"


class Wire:
    """Builds a capture: each ``ask`` is one HTTP exchange with its answer."""

    def __init__(self, session: str | None = "s1") -> None:
        self.messages: list = []
        self.exchange = 0
        self.session = session

    def ask(self, method: str, params: dict | None = None, result: object = None,
            error: dict | None = None, status: int = 200) -> None:  # fmt: skip
        self.exchange += 1
        request = {"jsonrpc": "2.0", "id": self.exchange, "method": method, "params": params or {}}
        self.messages += messages_in(
            request, CLIENT, self.exchange, "POST /mcp", None, self.session
        )
        self.messages += messages_in({}, LAB, self.exchange, "POST /mcp", status, self.session)
        answer: dict = {"jsonrpc": "2.0", "id": self.exchange}
        answer.update({"error": error} if error else {"result": result or {}})
        self.messages += messages_in(answer, LAB, self.exchange, "POST /mcp", status, self.session)

    def notify(self, uri: str = URI) -> None:
        note = {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                "params": {"uri": uri}}  # fmt: skip
        self.messages += messages_in(note, LAB, 0, "GET /mcp", 200, self.session)


def read_result(text: str) -> dict:
    return {"contents": [{"uri": URI, "mimeType": "text/plain", "text": text}]}


def test_the_whole_legacy_flow_fills_every_checkpoint_in_order() -> None:
    wire = Wire()
    wire.ask("initialize", {"protocolVersion": "2025-11-25"}, {"protocolVersion": "2025-11-25"})
    wire.ask("resources/list", result={"resources": []})
    wire.ask("resources/read", {"uri": URI}, read_result(V1))
    wire.ask("resources/subscribe", {"uri": URI})
    wire.notify()
    wire.ask("resources/read", {"uri": URI}, read_result(V2))
    marks = checklist(wire.messages, URI)
    assert all(marks.values()), marks
    assert list(marks) == ["connected", "discovered", "read_initial", "subscribed",
                           "notified", "re_read"]  # fmt: skip


def test_refused_and_other_requests_are_not_checkpoints() -> None:
    wire = Wire()
    wire.ask("initialize", result={"protocolVersion": "2025-06-18"})
    wire.ask("resources/subscribe", {"uri": URI}, error={"code": -32601, "message": "no"})
    wire.ask("resources/read", {"uri": "test://other"}, read_result(V1))
    wire.ask("tools/call", {"name": "get_review_status"}, {"content": [{"text": V1}]})
    wire.notify("test://other")
    marks = checklist(wire.messages, URI)
    assert {k for k, v in marks.items() if v} == {"connected"}, marks


def test_a_listen_naming_the_resource_is_a_subscribe_and_its_event_a_notification() -> None:
    wire = Wire(session=None)  # 2026-07-28 has no sessions
    wire.ask("server/discover", result={"supportedVersions": ["2026-07-28"]})
    wire.ask("resources/read", {"uri": URI}, read_result(V1))
    listen = {"notifications": {"resourceSubscriptions": [URI]}}
    wire.ask("subscriptions/listen", listen)
    wire.notify()
    wire.ask("resources/read", {"uri": URI}, read_result(V2))
    marks = checklists(wire.messages, URI)[None]
    assert [k for k, v in marks.items() if not v] == ["discovered"], marks
    # A listen for list-changed events only is not a subscribe to the resource.
    other = Wire(session=None)
    other.ask("subscriptions/listen", {"notifications": {"resourcesListChanged": True}})
    assert checklist(other.messages, URI)["subscribed"] is None


def test_a_read_after_a_notification_at_version_1_is_no_re_read() -> None:
    wire = Wire()
    wire.ask("initialize", result={})
    wire.ask("resources/read", {"uri": URI}, read_result(V1))
    wire.ask("resources/subscribe", {"uri": URI})
    wire.notify()
    wire.ask("resources/read", {"uri": URI}, read_result(V1))
    marks = checklist(wire.messages, URI)
    assert marks["notified"] and marks["re_read"] is None


def test_over_stdio_a_listen_the_lab_acknowledged_is_a_subscribe() -> None:
    """A stdio capture has no HTTP status: the lab's acknowledgement answers the listen."""

    def line(message: dict, sender: str) -> list:
        return messages_in(message, sender, 0, "stdio", None, None)

    listen = {"notifications": {"resourceSubscriptions": [URI]}}
    read = {"uri": URI}
    asked = {"jsonrpc": "2.0", "id": "l", "method": "subscriptions/listen", "params": listen}
    flow = [
        *line({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": read}, CLIENT),
        *line({"jsonrpc": "2.0", "id": 1, "result": read_result(V1)}, LAB),
        *line(asked, CLIENT),
    ]
    assert checklist(flow, URI)["subscribed"] is None  # not answered yet
    acknowledged = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": listen}  # fmt: skip
    updated = {"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": URI}}  # fmt: skip
    flow += [*line(acknowledged, LAB), *line(updated, LAB)]
    flow += line({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": read}, CLIENT)
    flow += line({"jsonrpc": "2.0", "id": 2, "result": read_result(V2)}, LAB)
    marks = checklist(flow, URI)
    assert marks["subscribed"] and marks["notified"] and marks["re_read"], marks


def test_two_stdio_connections_with_the_same_request_ids_stay_apart(tmp_path) -> None:
    """Each stdio tap (a server process the client started) numbers its own messages: a
    list on one and a read with the same id on another are both seen."""
    import subprocess
    import sys

    server = ("import sys, json\nfor line in sys.stdin:\n    m = json.loads(line)\n"
              "    print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': "
              "{'resources': []} if m['method'] == 'resources/list' else "
              f"{read_result(V1)!r}}}), flush=True)\n")  # fmt: skip
    out = tmp_path / "wire.jsonl"
    for method, params in (("resources/list", {}), ("resources/read", {"uri": URI})):
        ask = {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}
        subprocess.run(
            [sys.executable, "-m", "mcp_lab.runners.stdio_tap", "--out", str(out), "--",
             sys.executable, "-c", server],
            input=json.dumps(ask) + "\n", text=True, capture_output=True, timeout=60, check=True,
        )  # fmt: skip
    messages = from_jsonl(out.read_text())
    assert len({m.exchange for m in messages}) == 2
    marks = checklist(messages, URI)
    assert marks["discovered"] and marks["read_initial"], marks


def test_in_a_template_scenario_any_resource_of_the_template_is_the_watched_one() -> None:
    """The lab scores a template scenario on whichever resource of the template a client
    uses (test://review/status is test://review/{id} too): the wire must agree."""
    from mcp_lab.scenarios import registry

    template = registry.get("template")
    wire = Wire()
    wire.ask("initialize", result={"protocolVersion": "2025-11-25"})
    wire.ask("resources/read", {"uri": URI}, read_result(V1))
    wire.ask("resources/subscribe", {"uri": URI})
    assert template.read_uri != URI
    strict = checklist(wire.messages, template.read_uri)
    assert strict["read_initial"] is None and strict["subscribed"] is None

    def same(uri: str) -> bool:
        return template.catalog.same_resource(uri, template.watched)

    marks = checklist(wire.messages, template.read_uri, same)
    assert marks["read_initial"] and marks["subscribed"], marks


def test_the_stdio_tap_drops_a_line_past_its_limit_and_says_what_is_no_message(
    tmp_path: Path,
) -> None:
    """A client that writes garbage, or a line with no end past the tap's limit: the
    tap says so (in the lab's log when it has one), passes what it can, and lives."""
    import subprocess
    import sys

    from mcp_lab.runners import stdio_tap

    echo = "import sys\nfor line in sys.stdin.buffer:\n    sys.stdout.buffer.write(line)\n"
    out, log = tmp_path / "wire.jsonl", tmp_path / "lab.log"
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode() + b"\n"
    endless = b"x" * (stdio_tap._LINE_LIMIT + 5)  # no newline, then the stream ends
    sent = b"not json \x1b[31m\n" + ping + endless
    done = subprocess.run(
        [sys.executable, "-m", "mcp_lab.runners.stdio_tap", "--out", str(out), "--log",
         str(log), "--", sys.executable, "-c", echo],
        input=sent, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert b"Traceback" not in done.stderr
    assert done.stdout == b"not json \x1b[31m\n" + ping  # the endless line is not passed on
    said = log.read_text()
    assert "the client wrote a line that is no JSON-RPC message: not json \\x1b[31m" in said
    assert f"a line of {len(endless)} bytes, over the tap's limit" in said
    assert [m.method for m in from_jsonl(out.read_text())] == ["ping", "ping"]  # both ways


def test_the_stdio_taps_last_words_count_every_line_for_the_row(tmp_path: Path) -> None:
    """The log quotes the first 3 lines that are no message; the tap's last line counts
    them all, and row_notes sums every connection's."""
    import subprocess
    import sys

    from mcp_lab.runners import stdio_tap

    echo = "import sys\nfor line in sys.stdin.buffer:\n    sys.stdout.buffer.write(line)\n"
    log = tmp_path / "lab.log"
    for _connection in range(2):
        subprocess.run(
            [sys.executable, "-m", "mcp_lab.runners.stdio_tap", "--out", str(tmp_path / "w"),
             "--log", str(log), "--", sys.executable, "-c", echo],
            input=b"".join(b"noise %d\n" % i for i in range(5)), capture_output=True,
            timeout=60, check=True,
        )  # fmt: skip
    notes = stdio_tap.row_notes(log.read_text().splitlines())
    assert notes == [
        "10 line(s) the client wrote to the server were not JSON-RPC (the first: noise 0): "
        "passed on, not recorded",
        "10 line(s) the lab's server wrote to the client were not JSON-RPC (the first: "
        "noise 0): passed on, not recorded",
    ], notes
    assert stdio_tap.row_notes(["mcp-lab stdio tap: nothing of the kind", "a log line"]) == []
