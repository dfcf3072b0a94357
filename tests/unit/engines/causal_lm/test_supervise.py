"""serve's supervision of vLLM: restart on an exit nobody asked for, a bounded number of times, and the same
exit codes as before on SIGTERM/SIGINT (fake servers: no vLLM here)."""

import signal

from infertune.engines.causal_lm.supervise import clean_code, supervise
from infertune.errors import InfertuneError


class FakeProc:
    def __init__(self, exits_after: int | None, code: int):
        self.polls, self.exits_after, self.code, self.pid = 0, exits_after, code, 1000 + id(self) % 1000

    def poll(self):
        self.polls += 1
        return self.code if self.exits_after is not None and self.polls > self.exits_after else None


class FakeServer:
    def __init__(self, exits_after: int | None = None, code: int = -9, healthy: bool = True):
        self.proc = FakeProc(exits_after, code)
        self.healthy, self.stopped_with = healthy, None

    def wait_healthy(self, timeout_s):
        if not self.healthy:
            raise InfertuneError("vLLM exited with code 1 before it was healthy")
        return 0.1

    def stop(self, sig=signal.SIGTERM, grace_s=30):
        self.stopped_with = sig
        return self.proc.code if self.proc.exits_after is not None else -sig


def run(first, starts, stopping=None, max_restarts=3, stop_after_starts=None):
    holder, said, made = [first], [], []
    stopping = [] if stopping is None else stopping

    def start():
        made.append(starts.pop(0))
        if stop_after_starts is not None and len(made) >= stop_after_starts:
            stopping.append(signal.SIGTERM)
        return made[-1]

    code = supervise(holder, start, stopping, max_restarts=max_restarts, poll_s=0, say=said.append)
    return code, holder, said, made


def test_an_unexpected_exit_is_restarted_then_sigterm_stops_cleanly():
    first, second = FakeServer(exits_after=2), FakeServer(exits_after=None)
    stopping: list[int] = []
    holder, said = [first], []

    def start():
        stopping.append(signal.SIGTERM)  # the user stops serve once the new vLLM is up
        return second

    code = supervise(holder, start, stopping, poll_s=0, say=said.append)
    assert code == 0 and holder[0] is second and second.stopped_with == signal.SIGTERM
    assert any("exited unexpectedly with code -9; restarting it (1 of at most 3)" in s for s in said)


def test_restarts_are_bounded_and_the_last_exit_code_is_returned():
    crash = [FakeServer(exits_after=1, code=-9) for _ in range(3)]
    code, holder, said, made = run(FakeServer(exits_after=1, code=-9), list(crash), max_restarts=2)
    assert code == -9 and len(made) == 2
    assert "giving up" in said[-1] and "2 time(s)" in said[-1]
    assert sum("restarted (pid" in s for s in said) == 2


def test_a_restart_that_never_comes_up_counts_against_the_bound():
    code, _, said, made = run(FakeServer(exits_after=1, code=1),
                              [FakeServer(exits_after=0, code=1, healthy=False)] * 2, max_restarts=2)
    assert code == 1 and len(made) == 2 and sum("did not come up" in s for s in said) == 2


def test_a_clean_unasked_exit_is_not_reported_as_success_when_giving_up():
    code, *_ = run(FakeServer(exits_after=1, code=0), [], max_restarts=0)
    assert code == 1


def test_sigterm_and_sigint_keep_their_exit_codes():
    assert clean_code(-signal.SIGTERM) == 0 and clean_code(-signal.SIGINT) == 0 and clean_code(0) == 0
    assert clean_code(-signal.SIGKILL) == -9 and clean_code(3) == 3
    srv = FakeServer(exits_after=None)
    code, *_ = run(srv, [], stopping=[signal.SIGINT])
    assert code == 0 and srv.stopped_with == signal.SIGINT


def test_a_vllm_dying_during_the_greedy_check_does_not_end_serve(monkeypatch, capsys):
    import httpx

    import infertune.engines.causal_lm.vllm_server as vs

    def dies(url, artifact):
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.")

    monkeypatch.setattr(vs, "check_greedy", dies)
    vs.greedy_or_say("http://127.0.0.1:9", "art")
    assert "greedy check interrupted: RemoteProtocolError" in capsys.readouterr().err
