"""HTML pages of benchmark results: one self-contained file per results JSON of bench/peers, bench/curve or
bench/copy.

The page is made from the JSON the bench already writes ({"bench", "meta", "rows"}, see benchlib's
write_results), never from the run itself, so that `bench/report` can rebuild it from any old results
file. Charts are inline SVG (bench/lib/charts.py) with their figures written on them; the page loads
nothing at view time, so it can be mailed, attached to an issue or opened from a checkout offline.
Python 3 standard library only.
"""

import datetime
import json
import os
import re
import shutil
import sys
from html import escape

import charts
from benchlib import fmt, fmt_iops


class ReportError(Exception):
    """A results file that no page can be made of; the message names the problem in one line."""


# ---------------------------------------------------------------- entry points


def load(path):
    try:
        with open(path) as f:
            results = json.load(f)
    except OSError as e:
        raise ReportError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise ReportError(f"{path} is not JSON: {e}") from None
    if not isinstance(results, dict) or not isinstance(results.get("rows"), list):
        raise ReportError(f"{path} is not a benchmark results file (no \"rows\" list)")
    return results


def render(results, when=""):
    """The HTML page of one results dict; when: the time of the run, as shown in the title."""
    bench = results.get("bench")
    page = PAGES.get(bench)
    if page is None:
        raise ReportError(f"no report for {bench!r} results; reports exist for {', '.join(PAGES)}")
    try:
        return page(results, when)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ReportError(f"malformed {bench} results: {type(e).__name__}: {e}") from None


def write(results_path, out_path=None):
    """Renders results_path into out_path (default: the same name ending in .html); returns out_path."""
    results = load(results_path)
    if out_path is None:
        out_path = re.sub(r"\.json$", "", results_path) + ".html"
    page = render(results, when_of(results, results_path))
    try:
        with open(out_path, "w") as f:
            f.write(page)
    except OSError as e:
        raise ReportError(f"cannot write {out_path}: {e.strerror}") from None
    return out_path


def write_beside(csv_path):
    """For a bench that has just written <bench>-<time>.csv and .json: the .html beside them and a copy
    as <bench>-latest.html. Returns the page's path, or None (said on stderr) when it could not be made:
    a benchmark never fails over its report."""
    base = csv_path[:-len(".csv")]
    try:
        out = write(base + ".json", base + ".html")
        bench = load(base + ".json").get("bench")
        shutil.copyfile(out, os.path.join(os.path.dirname(out), f"{bench}-latest.html"))
        return out
    except (ReportError, OSError) as e:
        print(f"report: {e}", file=sys.stderr)
        return None


def when_of(results, path=None):
    """The run's time: the JSON's own "time", else the stamp in its file name, else the file's mtime."""
    stamp = results.get("time")
    if not stamp and path:
        m = re.search(r"(\d{8}T\d{6}Z)", os.path.basename(path))
        stamp = m.group(1) if m else None
    if stamp:
        try:
            t = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ")
            return t.strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            return str(stamp)
    if path and os.path.exists(path):
        t = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
        return t.strftime("%Y-%m-%d %H:%M UTC (file time)")
    return ""


# ---------------------------------------------------------------- formatting


def fmt_cpu(v):
    return fmt(v, ".3f" if v is not None and v < 0.1 else ".2f")


# how each figure of a row is shown, by its key in the results
FORMATS = {"MBps": lambda v: fmt(v, ".0f"), "iops": fmt_iops, "p50_us": lambda v: fmt(v, ".1f"),
           "p99_us": lambda v: fmt(v, ".1f"), "cpu_s_per_GB": fmt_cpu, "server_cpu_s_per_GB": fmt_cpu,
           "client_cpu_pct": lambda v: fmt(v, ".0f"), "idle_pct": lambda v: fmt(v, ".0f"),
           "peak_rss_MiB": lambda v: fmt(v, ".0f")}


def table(headers, rows, numeric_from=1, numeric=None):
    """An HTML table. Figures are right-aligned: the columns in `numeric`, else every column from
    numeric_from on. A cell given as (text, css_class) gets that class instead."""
    numeric = set(numeric) if numeric is not None else set(range(numeric_from, len(headers)))
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            text, cls = c if isinstance(c, tuple) else (c, "n" if i in numeric else "")
            cells.append(f'<td class="{cls}">{escape(str(text))}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


CSS = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1000px; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.8em; }
p.setup { color: #444; font-size: 0.9em; margin: 0.2em 0; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 2px 8px; } th { background: #f2f2f2; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.meets { color: #1a7f37; font-weight: bold; } td.misses { color: #c62828; font-weight: bold; }
td.cmd { font-family: monospace; font-size: 0.9em; }
svg.chart { display: block; margin: 0.4em 0; max-width: 100%; height: auto; }
code { font-size: 0.85em; } details { margin: 1em 0; } summary { cursor: pointer; color: #333; }
"""


def page(title, when, setup_lines, sections):
    setup = "".join(f'<p class="setup">{escape(line)}</p>' for line in setup_lines if line)
    heading = escape(title) + (f" <small>{escape(when)}</small>" if when else "")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)} {escape(when)}</title><style>{CSS}</style></head>\n<body>\n"
            f"<h1>{heading}</h1>\n{setup}\n" + "\n".join(sections) + "\n</body></html>\n")


def machine_lines(m):
    if not m:
        return []
    load = " ".join(m.get("loadavg") or [])
    return [f"machine: {m.get('nproc', '?')} cpus ({m.get('cpu', '?')}), {m.get('memory', '?')} RAM, "
            f"kernel {m.get('kernel', '?')}, load {load}",
            "peers: " + ", ".join(str(m[k]) for k in ("fio", "nbdkit", "nbd-server", "qemu-nbd") if k in m),
            f"jnbd: {m.get('jnbd', '?')} on {m.get('java', '?')}"]


# ---------------------------------------------------------------- bench/peers

# jnbd in blues, the floor (a yardstick) in orange, the peers in their own colours; -tls variants share
# their server's colour, as one run never holds both
SERVER_COLORS = {"jnbd": "#1f5fa8", "jnbd-sorted": "#5b9bd5", "nbdkit": "#2e8b57", "nbd-server": "#8e6bbf",
                 "qemu-nbd": "#a0522d", "floor": "#e07b00", "floor-2t": "#f0a040", "floor-simple": "#c8a060"}
OTHER_COLORS = ("#777777", "#b03060", "#008b8b", "#6b8e23")


def server_colors(names):
    """A colour per server. In a TLS run plaintext jnbd is the baseline beside jnbd-tls: a paler blue."""
    colors = {}
    for i, n in enumerate(names):
        base = n[:-len("-tls")] if n.endswith("-tls") else n
        colors[n] = SERVER_COLORS.get(base, OTHER_COLORS[i % len(OTHER_COLORS)])
        if n + "-tls" in names:
            colors[n] = _paler(colors[n])
    return colors


def _paler(color):
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{(c + 2 * 255) // 3:02x}" for c in rgb)


def role(name):
    if name.startswith("jnbd"):
        return "jnbd"
    if name.startswith("floor"):
        return "yardstick (bench/floor)"
    return "peer"


def headline(rows):
    """The figure a workload is judged by, as in benchlib's MATRIX: small requests are counted (IOPS),
    large ones measured in bytes (MB/s)."""
    for r in rows:
        if r.get("bs"):
            return "iops" if size_bytes(r["bs"]) < 64 << 10 else "MBps"
    return "MBps"


def size_bytes(text):
    """fio's block size ("4k", "1M", "65536") in bytes."""
    text = str(text).strip().upper()
    shift = {"K": 10, "M": 20, "G": 30}.get(text[-1:], 0)
    return int(float(text[:-1] if shift else text) * (1 << shift))


def workload_label(key, rows):
    for r in rows:
        if r.get("rw") and r.get("bs"):
            return f"{r['rw']} {r['bs']} QD{r.get('iodepth', '?')}"
    return key


def peers_page(results, when):
    meta, rows = results.get("meta") or {}, results["rows"]
    names = list(meta.get("servers") or {})
    for r in rows:
        if r["server"] not in names:
            names.append(r["server"])
    colors = server_colors(names)
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    labels = {w: workload_label(w, [r for r in rows if r["workload"] == w]) for w in workloads}
    tls = any(n.endswith("-tls") for n in names)

    setup = [f"fio nbd engine, one connection, --size={meta.get('fio_size', '?')} --runtime={meta.get('runtime', '?')} "
             f"--time_based --ramp_time={meta.get('ramp', '?')}; each figure the best of {meta.get('rounds', '?')} "
             f"interleaved round(s)" + (f" after {meta['warmup']} s of unmeasured warm-up per workload"
                                       if meta.get("warmup") else "") + f"; file {meta.get('file', '?')}",
             *machine_lines(meta.get("machine")),
             "Server CPU per GB: utime+stime of the server's processes over the measured window, per 10⁹ bytes "
             "moved. Latency: fio's completion latency per request."]
    metrics = {w: headline([r for r in rows if r["workload"] == w]) for w in workloads}
    sections = [_targets_section(meta.get("targets") or {}, labels, metrics)]
    for w in workloads:
        sections.append(_workload_section(w, labels[w], [r for r in rows if r["workload"] == w], names, colors))
    sections.append(_servers_section(meta.get("servers") or {}, names))
    sections.append(_runs_section(meta.get("runs") or [], labels))
    return page("bench/peers" + (" (TLS)" if tls else ""), when, setup, [s for s in sections if s])


def _workload_section(key, label, rows, names, colors):
    by_server = {r["server"]: r for r in rows}
    servers = [n for n in names if n in by_server]
    ok = {n: by_server[n].get("status") == "ok" for n in servers}
    metric = headline(rows)

    def bars(n, *keys):
        r = by_server[n]
        if not ok[n]:
            return [(None, _short_status(r))] + [(None, "")] * (len(keys) - 1)
        if len(keys) > 1:  # latency percentiles, written short: "p99 28181"
            return [(r.get(k), f"{k[:3]} {fmt(r.get(k), '.1f' if (r.get(k) or 0) < 100 else '.0f')}") for k in keys]
        return [(r.get(k), FORMATS[k](r.get(k))) for k in keys]

    panels = [charts.Panel("IOPS" if metric == "iops" else "MB/s", [bars(n, metric) for n in servers]),
              charts.Panel("server CPU s/GB (less is better)", [bars(n, "cpu_s_per_GB") for n in servers]),
              charts.Panel("latency µs (less is better)", [bars(n, "p50_us", "p99_us") for n in servers],
                           shades=(1.0, 0.4), legend="solid: p50, light: p99")]
    svg = charts.bar_panels(label, servers, [colors[n] for n in servers], panels,
                            css_class="chart workload", attrs={"data-workload": key})
    trows = []
    for n in servers:
        r = by_server[n]
        if not ok[n]:
            trows.append([n, (r.get("status", "?"), "")] + [""] * 7)
            continue
        trows.append([n, FORMATS["MBps"](r.get("MBps")), FORMATS["iops"](r.get("iops")),
                      *(FORMATS[k](r.get(k)) for k in ("p50_us", "p99_us", "cpu_s_per_GB", "client_cpu_pct",
                                                      "idle_pct", "peak_rss_MiB"))])
    heads = ["server", "MB/s", "IOPS", "p50 µs", "p99 µs", "CPU s/GB", "fio CPU %", "idle %", "peak RSS MiB"]
    return (f'<section class="workload" id="{escape(key)}"><h2>{escape(label)}</h2>\n{svg}\n'
            f"{table(heads, trows)}</section>")


def _short_status(r):
    status = str(r.get("status") or "not run")
    return "failed" if status.startswith("failed") else status


def _targets_section(targets, labels, metrics):
    parts, shown = [], []
    for jnbd, rows in targets.items():
        if not rows or rows in shown:  # results before 9ec7b2d held one list under every jnbd's name
            continue
        shown.append(rows)
        body = [[*_target_cells(t, labels, metrics), str(t.get("goal", "")),
                 (str(t.get("verdict", "")), str(t.get("verdict", "")))] for t in rows]
        parts.append(f"<h2>{escape(jnbd)} against the best peer</h2>" +
                     table(["target", jnbd, "best peer", "", "ratio", "goal", "verdict"], body, numeric=(1, 3, 4)))
    return "\n".join(parts)


def _target_cells(t, labels, metrics):
    """(what, jnbd's figure, best peer, its figure, ratio) of one of bench/peers' target rows, whose
    "target" is "<workload> <MBps|iops|cpu_s_per_GB|p50|tls/plain>" or "peak RSS MiB"."""
    key, _, kind = str(t.get("target", "")).partition(" ")
    label = labels.get(key, key)
    shown = {"MBps": (label, FORMATS["MBps"]), "iops": (label, FORMATS["iops"]),
             "cpu_s_per_GB": (label + " CPU s/GB", fmt_cpu), "p50": (label + " p50 µs", FORMATS["p50_us"]),
             "tls/plain": (label + ": TLS against plaintext jnbd", FORMATS[metrics.get(key, "MBps")]),
             "RSS MiB": ("peak RSS MiB", FORMATS["peak_rss_MiB"])}
    what, f = shown.get(kind, (str(t.get("target", "")), lambda v: fmt(v, ".2f")))
    ratio = t.get("ratio")
    return (what, f(t.get("jnbd")), str(t.get("best_peer") or ""), f(t["peer"]) if t.get("peer") is not None else "",
            fmt(ratio, ".2f") + "×" if ratio is not None else "")


def _servers_section(servers, names):
    rows = []
    for n in names:
        s = servers.get(n) or {}
        status = "missing" if s.get("missing") else ("error: " + s["error"] if s.get("error") else "ok")
        rows.append([n, role(n), fmt(s.get("peak_rss_MiB"), ".0f"), status,
                     (" ".join(map(str, s.get("argv") or [])), "cmd")])
    return "<h2>Servers</h2>" + table(["server", "role", "peak RSS MiB", "status", "command"], rows, numeric=(2,))


def _runs_section(runs, labels):
    if not runs:
        return ""
    rows = [[r.get("round", ""), labels.get(r.get("workload"), r.get("workload", "")), r.get("server", ""),
             *(FORMATS[k](r.get(k)) for k in ("MBps", "iops", "p50_us", "p99_us", "cpu_s_per_GB",
                                              "client_cpu_pct", "idle_pct")),
             (r.get("error") or "")[:120]] for r in runs]
    return (f"<details><summary>Every run ({len(runs)}): the rounds behind each best figure</summary>"
            + table(["round", "workload", "server", "MB/s", "IOPS", "p50 µs", "p99 µs", "CPU s/GB",
                     "fio CPU %", "idle %", "error"], rows, numeric_from=3) + "</details>")


# ---------------------------------------------------------------- bench/curve

CURVE_COLORS = {"cached": "#1f77b4", "direct": "#d62728", "local": "#7f7f7f"}
CURVE_DASH = {1: "", 2: "8,4", 4: "2,3"}
CURVE_LABELS = {"cached": "jnbd cached", "direct": "jnbd direct", "local": "local O_DIRECT"}


def curve_chart(rows, title, css_class="chart curve"):
    """Bandwidth against request size, one line per mode and queue depth (bench/curve's .svg and page)."""
    points = {}
    for r in rows:
        if r.get("MBps") is not None:
            points.setdefault((r["mode"], int(r["iodepth"])), []).append((int(r["bs_bytes"]), float(r["MBps"])))
    order = list(CURVE_COLORS)
    series = [{"label": f"{CURVE_LABELS.get(mode, mode)}, QD{depth}", "color": CURVE_COLORS.get(mode, "black"),
               "dash": CURVE_DASH.get(depth, "4,2"), "points": pts}
              for (mode, depth), pts in sorted(points.items(),
                                               key=lambda kv: (order.index(kv[0][0]) if kv[0][0] in order
                                                               else len(order), kv[0][1]))]
    return charts.line_chart(title, series, "request size (bytes, log scale)", "bandwidth (MB/s)", css_class)


def curve_page(results, when):
    meta, rows = results.get("meta") or {}, results["rows"]
    m = meta.get("machine") or {}
    rw = meta.get("rw", "read")
    title = (f"jnbd sequential {rw}: bandwidth vs request size ({m.get('nproc', '?')} cpus, loopback, "
             f"kernel {m.get('kernel', '?')})")
    setup = [f"fio, {rw}, --runtime={meta.get('runtime', '?')} --ramp_time={meta.get('ramp', '?')} per point, "
             f"best of {meta.get('rounds', '?')} round(s); file {meta.get('file', '?')}. jnbd cached: a "
             f"mode=cached export (sendfile from the page cache); jnbd direct: mode=direct (O_DIRECT on the server); "
             f"local O_DIRECT: fio's libaio reads of the file itself, the disk's own curve.",
             *machine_lines(m)]
    keys = list(dict.fromkeys((r["mode"], int(r["iodepth"])) for r in rows))
    order = list(CURVE_COLORS)
    keys.sort(key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[1]))
    sizes = sorted(dict.fromkeys((int(r["bs_bytes"]), r["bs"]) for r in rows))
    at = {(r["mode"], int(r["iodepth"]), int(r["bs_bytes"])): r for r in rows}
    mbps = [[bs] + [FORMATS["MBps"]((at.get((mo, d, n)) or {}).get("MBps")) for mo, d in keys] for n, bs in sizes]
    points = [[CURVE_LABELS.get(r["mode"], r["mode"]), r["bs"], r["iodepth"],
               *(FORMATS[k](r.get(k)) for k in ("MBps", "iops", "p50_us", "p99_us", "server_cpu_s_per_GB"))]
              for r in sorted(rows, key=lambda r: (order.index(r["mode"]) if r["mode"] in order else len(order),
                                                   int(r["iodepth"]), int(r["bs_bytes"])))]
    sections = [curve_chart(rows, title),
                "<h2>MB/s</h2>" + table(["size"] + [f"{CURVE_LABELS.get(mo, mo)} QD{d}" for mo, d in keys], mbps),
                "<details><summary>Every point: latency and server CPU</summary>" +
                table(["mode", "size", "QD", "MB/s", "IOPS", "p50 µs", "p99 µs", "server CPU s/GB"], points,
                      numeric_from=2) + "</details>"]
    return page("bench/curve", when, setup, sections)


# ---------------------------------------------------------------- bench/copy

TOOL_COLORS = {"jnbd": "#1f5fa8", "nbdcopy": "#2e8b57", "qemu-img": "#a0522d"}
COPY_CASES = {"nbd-nbd": "NBD → NBD", "nbd-file": "NBD → file", "file-nbd": "file → NBD", "sparse": "sparse NBD → NBD"}


def copy_page(results, when):
    meta, rows = results.get("meta") or {}, results["rows"]
    m = meta.get("machine") or {}
    size = meta.get("size")
    setup = [f"{fmt(size / (1 << 20), '.0f') if size else '?'} MiB disk; each figure the median of "
             f"{meta.get('rounds', '?')} interleaved round(s), fresh servers for every run; every copy verified "
             f"by {meta.get('verifier') or 'nothing'} in round 1, outside the timed part; file {meta.get('file', '?')}",
             "Time: from spawning the tool to its exit (the JVM's start included for jnbd); NBD → file adds an fsync "
             "of the destination after the tool exits, counted. CPU s/GB: the tool's utime+stime per 10⁹ bytes of "
             "disk. Peak RSS: the tool's maxrss.",
             f"sparse source: nbdkit {meta['sparse']}; MiB read: nbdkit's stats filter" if meta.get("sparse") else "",
             *machine_lines(m), f"tools: {m.get('nbdcopy', '?')}, {m.get('qemu-img', '?')}"]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    sections = [_copy_targets(meta.get("targets") or [])]
    sections += [_copy_case(c, [r for r in rows if r["case"] == c]) for c in cases]
    commands = meta.get("commands") or {}
    if commands:
        sections.append("<h2>Commands</h2>" + table(["tool", "command"], [[t, (c, "cmd")] for t, c in commands.items()],
                                                    numeric=()) + f'<p class="setup">{escape(meta.get("commands_note", ""))}</p>')
    runs = meta.get("runs") or []
    if runs:
        body = [[r.get("round", ""), COPY_CASES.get(r.get("case"), r.get("case", "")), r.get("tool", ""),
                 *(fmt(r.get(k), f) for k, f in (("MiBps", ".0f"), ("wall_s", ".2f"), ("cpu_s_per_GB", ".2f"),
                                                 ("peak_rss_MiB", ".0f"), ("sync_s", ".2f"), ("read_MiB", ".2f"))),
                 (r.get("error") or r.get("verified") or "")[:120]] for r in runs]
        sections.append(f"<details><summary>Every run ({len(runs)}): the rounds behind each median</summary>" +
                        table(["round", "case", "tool", "MiB/s", "time s", "CPU s/GB", "peak RSS MiB", "sync s",
                               "read MiB", "verified / error"], body, numeric=range(3, 9)) + "</details>")
    return page("bench/copy", when, setup, [s for s in sections if s])


def _copy_targets(targets):
    if not targets:
        return ""
    body = []
    for t in targets:
        case, _, what = str(t.get("target", "")).partition(" ")
        unit, spec = ("MiB read", ".2f") if what == "read_MiB" else ("MiB/s", ".0f")
        body.append([f"{COPY_CASES.get(case, case)} {unit}", fmt(t.get("jnbd"), spec), fmt(t.get("nbdcopy"), spec),
                     fmt(t.get("ratio"), ".2f") + "×", str(t.get("goal", "")),
                     (str(t.get("verdict", "")), str(t.get("verdict", "")))])
    return "<h2>jnbd against nbdcopy</h2>" + table(["target", "jnbd", "nbdcopy", "ratio", "goal", "verdict"], body,
                                                  numeric=(1, 2, 3))


def _copy_case(case, rows):
    tools = [r["tool"] for r in rows]
    ok = {r["tool"]: r.get("status") == "ok" for r in rows}

    def bars(key, spec):
        return [[(r.get(key), fmt(r.get(key), spec))] if ok[r["tool"]] else [(None, _short_status(r).split(":")[0])]
                for r in rows]

    panels = [charts.Panel("MiB/s", bars("MiBps", ".0f")),
              charts.Panel("CPU s/GB (less is better)", bars("cpu_s_per_GB", ".2f")),
              charts.Panel("peak RSS MiB (less is better)", bars("peak_rss_MiB", ".0f"))]
    if any(r.get("read_MiB") not in (None, "") for r in rows):
        panels.append(charts.Panel("MiB read from the source (less is better)", bars("read_MiB", ".2f")))
    label = COPY_CASES.get(case, case)
    colors = [TOOL_COLORS.get(t, OTHER_COLORS[i % len(OTHER_COLORS)]) for i, t in enumerate(tools)]
    svg = charts.bar_panels(label, tools, colors, panels, css_class="chart case", attrs={"data-case": case})
    body = [[r["tool"], *(fmt(r.get(k), f) for k, f in (("MiBps", ".0f"), ("wall_s", ".2f"), ("cpu_s_per_GB", ".2f"),
                                                        ("peak_rss_MiB", ".0f"), ("sync_s", ".2f"), ("read_MiB", ".2f"))),
             (r.get("verified") or "") if ok[r["tool"]] else (str(r.get("status", "?")), "")] for r in rows]
    return (f'<section class="case" id="{escape(case)}"><h2>{escape(label)}</h2>\n{svg}\n'
            + table(["tool", "MiB/s", "time s", "CPU s/GB", "peak RSS MiB", "sync s", "MiB read", "verified"], body,
                    numeric=range(1, 7)) + "</section>")


PAGES = {"peers": peers_page, "curve": curve_page, "copy": copy_page}
