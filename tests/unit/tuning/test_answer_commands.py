"""The command loop every family's worker job runs (tuning.worker.answer_commands): each command's answer is
("ok", value); one that raises, or that no handler knows, is ("error", its type, message and where), and the loop
goes on until "stop"."""

from infertune.tuning.worker import answer_commands


class Conn:
    def __init__(self, cmds):
        self.cmds, self.sent = list(cmds), []

    def recv(self):
        return self.cmds.pop(0)

    def send(self, msg):
        self.sent.append(msg)


def test_answers_until_stop_and_reports_failures_without_stopping():
    def boom(args):
        raise RuntimeError("no device")

    conn = Conn([("double", {"x": 2}), ("boom", {}), ("nope", {}), ("double", {"x": 5}), ("stop", None),
                 ("double", {"x": 7})])
    answer_commands(conn, {"double": lambda a: 2 * a["x"], "boom": boom})
    assert conn.sent[0] == ("ok", 4) and conn.sent[3] == ("ok", 10) and len(conn.sent) == 4
    kind, what = conn.sent[1]
    assert kind == "error" and what.startswith("RuntimeError: no device") and "boom" in what  # with the traceback
    assert conn.sent[2][0] == "error" and conn.sent[2][1].startswith("ValueError: unknown command nope")
    assert conn.cmds == [("double", {"x": 7})]  # nothing read after stop
