"""The /metrics scraper after a stall: it skips the slots it missed rather than firing them back to back,
so two samples are never closer than the interval (a rate read between them would be noise)."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from infertune.bench.telemetry import Telemetry

# the scraper's timeout is max(1 s, 2 intervals): a 0.4 s stall stays 0.6 s under it on a busy box (at 0.2 s
# intervals the 0.8 s stall came within 0.2 s of the timeout and a loaded CI box crossed it now and then)
INTERVAL = 0.1


def test_a_slow_scrape_skips_missed_slots():
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            calls.append(time.monotonic())
            if len(calls) == 2:
                time.sleep(4 * INTERVAL)  # busy for four slots, well under the client's 1 s timeout
            body = b"# TYPE reqs counter\nreqs_total 1\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        tel = Telemetry(f"http://127.0.0.1:{srv.server_port}/metrics", INTERVAL, time.monotonic())
        tel.nvml = None  # the scraper is the subject; a GPU here would only add a second series
        tel.start()
        time.sleep(15 * INTERVAL)
        series = [s for s in tel.stop() if s.source.endswith("/metrics")][0]
    finally:
        srv.shutdown()
    t = series.t
    assert len(t) >= 4 and not series.errors, (t, series.errors)
    assert "reqs_total" in series.series
    gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
    # the stalled sample (the second) is followed by one a full stall later, then the cadence resumes
    assert max(gaps) >= 3.5 * INTERVAL, gaps
    assert min(gaps) >= 0.9 * INTERVAL, gaps  # with `nxt += interval` the catch-up scrapes came ~0 s apart
