"""The HTML report of bench/peers, bench/curve and bench/copy results (bench/lib/report.py and bench/report).

Pages are built from the small results files in fixtures/, shaped as bench/peers, bench/curve and bench/copy
write them (peers.json: run T's figures for two workloads, qemu-nbd failed, the floor beside jnbd; copy.json:
two cases, qemu-img's sparse copy failed its verification). Run by
bin/test; alone: python3 -m unittest discover -s bench/tests
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from html.parser import HTMLParser

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "lib"))
import charts  # noqa: E402
import report  # noqa: E402


def fixture(name):
    with open(os.path.join(HERE, "fixtures", name)) as f:
        return json.load(f)


class Charts(HTMLParser):
    """The page's <svg> elements: their class, data-workload and the text drawn in them."""

    def __init__(self, page):
        super().__init__()
        self.charts, self.depth = [], 0
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "svg":
            a = dict(attrs)
            self.charts.append({"class": a.get("class", "").split(), "workload": a.get("data-workload"),
                                "case": a.get("data-case"), "text": []})
            self.depth += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.charts[-1]["text"].append(data)

    def workloads(self):
        return {c["workload"]: " | ".join(c["text"]) for c in self.charts if "workload" in c["class"]}

    def cases(self):
        return {c["case"]: " | ".join(c["text"]) for c in self.charts if "case" in c["class"]}


class PeersPage(unittest.TestCase):
    def setUp(self):
        self.page = report.render(fixture("peers.json"), "2026-11-23 07:38 UTC")
        self.charts = Charts(self.page).workloads()

    def test_one_chart_per_workload_in_the_order_run(self):
        self.assertEqual(list(self.charts), ["seqread", "randread1"])

    def test_each_chart_carries_throughput_cpu_and_latency_of_every_server(self):
        seq = self.charts["seqread"]
        for figure in ("read 1M QD8", "7452", "4273", "7825", "0.13", "0.26", "p50 995", "p99 4424", "p99 8159"):
            self.assertIn(figure, seq)
        rand = self.charts["randread1"]
        for figure in ("randread 4k QD1", "33.6K", "17.9K", "14.9K", "7.30", "p50 21.4", "p99 107"):
            self.assertIn(figure, rand)
        for chart in (seq, rand):
            for server in ("nbdkit", "qemu-nbd", "jnbd", "floor"):
                self.assertIn(server, chart)

    def test_a_failed_server_is_named_not_drawn(self):
        self.assertIn("failed", self.charts["seqread"])
        self.assertIn("failed: fio timed out", self.page)

    def test_targets_with_ratios_and_verdicts(self):
        self.assertIn("jnbd against the best peer", self.page)
        for text in ("<td class=\"\">read 1M QD8</td><td class=\"n\">7452</td>", "1.74×", "0.50×", "randread 4k QD1 p50 µs",
                     "read 1M QD8 CPU s/GB", "<td class=\"misses\">misses</td>", "<td class=\"meets\">meets</td>"):
            self.assertIn(text, self.page)

    def test_setup_and_every_run(self):
        for text in ("--runtime=5", "best of 2 interleaved round(s)", "kernel 6.18.44-fc-v657", "3d2ed8a fixture",
                     "Every run (3)", "yardstick"):
            self.assertIn(text, self.page)

    def test_self_contained(self):
        without_svg_namespace = self.page.replace('xmlns="http://www.w3.org/2000/svg"', "")
        for fetch in ("http://", "https://", "<script", "<link", "<img"):
            self.assertNotIn(fetch, without_svg_namespace)


class CurvePage(unittest.TestCase):
    def test_one_bandwidth_chart_and_the_figures(self):
        page = report.render(fixture("curve.json"))
        charts_ = Charts(page).charts
        self.assertEqual(len(charts_), 1)
        self.assertIn("curve", charts_[0]["class"])
        text = " | ".join(charts_[0]["text"])
        for label in ("jnbd cached, QD1", "jnbd direct, QD1", "local O_DIRECT, QD1", "bandwidth (MB/s)", "4K", "4M"):
            self.assertIn(label, text)
        for figure in ("<td class=\"n\">6151</td>", "<td class=\"n\">1540</td>", "<td class=\"n\">1903</td>"):
            self.assertIn(figure, page)


class CopyPage(unittest.TestCase):
    """copy.json: NBD → file and sparse, jnbd ahead of nbdcopy, qemu-img's sparse copy failed its verification."""

    def setUp(self):
        self.page = report.render(fixture("copy.json"), "2026-11-23 19:18 UTC")
        self.charts = Charts(self.page).cases()

    def test_one_chart_per_case_in_the_order_run(self):
        self.assertEqual(list(self.charts), ["nbd-file", "sparse"])

    def test_each_chart_carries_throughput_cpu_and_rss_of_every_tool(self):
        to_file = self.charts["nbd-file"]
        for figure in ("NBD → file", "412", "150", "153", "3.41", "1.68", "198", "23"):
            self.assertIn(figure, to_file)
        for tool in ("jnbd", "nbdcopy", "qemu-img"):
            self.assertIn(tool, to_file)
            self.assertIn(tool, self.charts["sparse"])
        self.assertNotIn("MiB read", to_file)

    def test_sparse_shows_what_each_tool_read_from_the_source(self):
        sparse = self.charts["sparse"]
        for figure in ("MiB read from the source", "3.23", "3.50", "1890", "1547"):
            self.assertIn(figure, sparse)

    def test_a_failed_copy_is_named_not_drawn(self):
        self.assertIn("failed", self.charts["sparse"])
        self.assertNotIn("nan", self.charts["sparse"])
        self.assertIn("failed: verify: copy differs", self.page)

    def test_targets_against_nbdcopy(self):
        for text in ("jnbd against nbdcopy", "NBD → file MiB/s", "2.75×", "sparse NBD → NBD MiB read", "0.92×",
                     "&lt;= nbdcopy", "<td class=\"meets\">meets</td>"):
            self.assertIn(text, self.page)

    def test_setup_commands_and_every_run(self):
        for text in ("median of 2 interleaved round(s)", "verified by jnbd cmp", "nbdcopy 1.14.2", "fsync",
                     "qemu-img convert -n -f raw -O raw SRC DST", "copy --no-progress SRC DST", "Every run (2)",
                     "0f478ec fixture"):
            self.assertIn(text, self.page)


class Scales(unittest.TestCase):
    def test_axis_ends_on_a_round_number_above_the_largest_value(self):
        self.assertEqual(charts.nice_top(7452), (8000, 2000))
        top, step = charts.nice_top(0.26)
        self.assertAlmostEqual(top, 0.3)
        self.assertAlmostEqual(step, 0.1)
        self.assertEqual(charts._ticks(0.3, 0.1), [0.0, 0.1, 0.2, 0.3])

    def test_when_from_the_results_or_the_file_name(self):
        self.assertEqual(report.when_of({"time": "20261123T073800Z"}), "2026-11-23 07:38 UTC")
        self.assertEqual(report.when_of({}, "bench/results/peers-20261123T185644Z.json"), "2026-11-23 18:56 UTC")


class Command(unittest.TestCase):
    """bench/report: a page from a file, and one line with exit status 2 for what it cannot use."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def run_report(self, *args):
        return subprocess.run([sys.executable, os.path.join(BENCH, "report"), *args], capture_output=True, text=True)

    def write(self, name, content):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def test_writes_the_page_beside_the_results_by_default(self):
        src = self.write("peers-20261123T073800Z.json", fixture("peers.json"))
        r = self.run_report(src)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = src[:-len(".json")] + ".html"
        with open(out) as f:
            self.assertEqual(list(Charts(f.read()).workloads()), ["seqread", "randread1"])

    def test_writes_where_told(self):
        out = os.path.join(self.tmp.name, "page.html")
        r = self.run_report(os.path.join(HERE, "fixtures", "curve.json"), out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.getsize(out) > 0)

    def test_bad_input_is_one_line_and_status_2(self):
        cases = {
            "missing file": (os.path.join(self.tmp.name, "nope.json"), "cannot read"),
            "not JSON": (self.write("a.json", "{rows: oops"), "is not JSON"),
            "no rows": (self.write("b.json", {"bench": "peers"}), "no \"rows\" list"),
            "other bench": (self.write("c.json", {"bench": "ab", "rows": []}), "no report for 'ab' results"),
            "malformed rows": (self.write("d.json", {"bench": "peers", "rows": [{"server": "jnbd"}]}),
                               "malformed peers results"),
        }
        for case, (path, message) in cases.items():
            with self.subTest(case):
                r = self.run_report(path)
                self.assertEqual(r.returncode, 2)
                self.assertIn(message, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        usage = self.run_report()
        self.assertEqual(usage.returncode, 2)
        self.assertIn("usage: bench/report", usage.stderr)


if __name__ == "__main__":
    unittest.main()
