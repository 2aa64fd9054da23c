// Joule report page: draws the energy charts (own small SVG code), the
// per-round timeline and the call browser of an Energy Society page, or the
// rate charts and race trajectories of a race page, from the JSON blobs the
// page embeds. Model output is untrusted text: it is only ever set as text
// (textContent / text nodes), never parsed as HTML.
(function () {
  'use strict';
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message || e)); });
  var origError = console.error;
  console.error = function () {
    errors.push(Array.prototype.map.call(arguments, String).join(' '));
    origError.apply(console, arguments);
  };

  var D = JSON.parse(document.getElementById('joule-data').textContent);
  // Sections a link jumps to keep clear of the sticky header, whatever its height.
  function headerClearance() {
    var h = document.querySelector('header');
    if (!h) return;
    var sticky = getComputedStyle(h).position === 'sticky';
    document.documentElement.style.setProperty('--header-h', (sticky ? Math.ceil(h.getBoundingClientRect().height) : 0) + 'px');
  }
  headerClearance();
  window.addEventListener('resize', headerClearance);
  // The page's prompt lines, parsed on first use; prompts are id lists where
  // a negative -k after id a stands for a+1 … a+k.
  var LINES = null;
  function lineTable() {
    if (!LINES) LINES = JSON.parse(document.getElementById('joule-lines').textContent);
    return LINES;
  }
  function expand(ids) {
    var out = [], prev = 0;
    for (var i = 0; i < ids.length; i++) {
      var v = ids[i];
      if (v < 0) { for (var k = 1; k <= -v; k++) out.push(prev + k); prev -= v; }
      else { out.push(v); prev = v; }
    }
    return out;
  }
  function linesText(ids) { var t = lineTable(); return expand(ids).map(function (i) { return t[i]; }).join('\n'); }
  var COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];
  var DASHES = ['', '7 4', '2 3', '10 3 2 3', '4 2 4 6', '1 5', '12 5', '6 2 2 2 2 2'];
  var SVGNS = 'http://www.w3.org/2000/svg';

  function el(tag, attrs) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === 'text') e.textContent = attrs[k];
      else if (k === 'cls') e.className = attrs[k];
      else if (attrs[k] !== null && attrs[k] !== undefined && attrs[k] !== false) e.setAttribute(k, attrs[k]);
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return e;
  }
  function sv(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) if (attrs[k] !== null && attrs[k] !== undefined) e.setAttribute(k, attrs[k]);
    return e;
  }
  function fmt(x, d) {
    if (x === null || x === undefined || isNaN(x)) return '-';
    return Number(x).toFixed(d === undefined ? 2 : d);
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
  function opt(value, label, selected) {
    var o = el('option', { value: value, text: label });
    if (selected) o.selected = true;
    return o;
  }
  function short(agent) { var m = /(\d+)$/.exec(agent); return m ? m[1] : agent; }

  // ---------- tooltip ----------
  var tip = document.getElementById('tooltip');
  function showTip(lines, x, y) {
    clear(tip);
    lines.forEach(function (l, i) { tip.appendChild(el(i === 0 ? 'strong' : 'div', { text: l })); });
    tip.hidden = false;
    var w = tip.offsetWidth, hh = tip.offsetHeight;
    var left = Math.min(window.innerWidth - w - 8, x + 14);
    var top = y + 14 + hh > window.innerHeight ? y - hh - 10 : y + 14;
    tip.style.left = Math.max(4, left) + window.scrollX + 'px';
    tip.style.top = Math.max(4, top) + window.scrollY + 'px';
  }
  function hideTip() { tip.hidden = true; }

  // ---------- charts ----------
  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) { hi = lo + 1; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(+v.toFixed(10));
    return out;
  }

  // A chart's title, as a line of text above its drawing: it wraps on a
  // narrow screen (an SVG text would be cut by the chart's edge).
  function chartTitle(host, title) {
    host.appendChild(el('p', { cls: 'chart-title', text: title }));
  }
  // Shorten `t` (an SVG text in the document) with an ellipsis until it is
  // at most `width` pixels long.
  function fitText(t, width) {
    var s = t.textContent;
    if (!t.getComputedTextLength) return;
    while (s.length > 1 && t.getComputedTextLength() > width) {
      s = s.slice(0, -1);
      t.textContent = s + '…';
    }
  }

  // series: [{label, short, points: [{x, y, info: [lines]}], width, band: [{x, lo, hi}]}]
  // opts: {title, xLabel, yLabel, xFmt, yMin, yMax, yFmt, kind: 'line'}
  function lineChart(host, series, opts) {
    clear(host);
    var W = Math.max(360, host.clientWidth || 800), H = opts.height || 330;
    var m = { l: 62, r: 86, t: 12, b: 44 };
    H -= 16;
    var xs = [], ys = [];
    series.forEach(function (s) {
      s.points.forEach(function (p) { xs.push(p.x); ys.push(p.y); });
      (s.band || []).forEach(function (b) { ys.push(b.hi); ys.push(b.lo); });
    });
    if (!xs.length) { host.appendChild(el('p', { cls: 'note', text: 'No data.' })); return; }
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    if (x1 === x0) x1 = x0 + 1;
    var y0 = opts.yMin !== undefined ? opts.yMin : Math.min(0, Math.min.apply(null, ys));
    var y1 = opts.yMax !== undefined ? opts.yMax : Math.max.apply(null, ys) * 1.05;
    if (!(y1 > y0)) y1 = y0 + 1;
    var X = function (v) { return m.l + (v - x0) / (x1 - x0) * (W - m.l - m.r); };
    var Y = function (v) { return H - m.b - (v - y0) / (y1 - y0) * (H - m.t - m.b); };
    var svg = sv('svg', { viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, class: 'chart-svg', role: 'group', tabindex: '0',
      'aria-label': opts.title + '. Use the left and right arrow keys to step through ' + (opts.xLabel || 'x') + ' values.' });
    chartTitle(host, opts.title);
    // At most one x label per 44 px of plot width, so narrow screens get fewer.
    var xn = Math.max(2, Math.min(12, x1 - x0, Math.floor((W - m.l - m.r) / 44)));
    var yt = niceTicks(y0, y1, 6), xt = niceTicks(x0, x1, xn);
    yt.forEach(function (v) {
      svg.appendChild(sv('line', { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), class: 'grid' }));
      var t = sv('text', { x: m.l - 6, y: Y(v) + 4, class: 'tick', 'text-anchor': 'end' });
      t.textContent = opts.yFmt ? opts.yFmt(v) : String(v); svg.appendChild(t);
    });
    xt.forEach(function (v) {
      if (Math.abs(v - Math.round(v)) > 1e-9 && opts.integerX) return;
      var t = sv('text', { x: X(v), y: H - m.b + 16, class: 'tick x-tick', 'text-anchor': 'middle' });
      t.textContent = opts.xFmt ? opts.xFmt(v) : String(v); svg.appendChild(t);
    });
    svg.appendChild(sv('line', { x1: m.l, x2: W - m.r, y1: Y(y0), y2: Y(y0), class: 'axis' }));
    svg.appendChild(sv('line', { x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, class: 'axis' }));
    var xl = sv('text', { x: (m.l + W - m.r) / 2, y: H - 6, class: 'axis-label', 'text-anchor': 'middle' });
    xl.textContent = opts.xLabel || ''; svg.appendChild(xl);
    var yl = sv('text', { x: 14, y: (m.t + H - m.b) / 2, class: 'axis-label', 'text-anchor': 'middle', transform: 'rotate(-90 14 ' + (m.t + H - m.b) / 2 + ')' });
    yl.textContent = opts.yLabel || ''; svg.appendChild(yl);
    var ends = [];
    series.forEach(function (s, i) {
      var color = s.color || COLORS[i % COLORS.length];
      var dash = s.dash !== undefined ? s.dash : DASHES[i % DASHES.length];
      if (s.band && s.band.length) {
        var up = s.band.map(function (b) { return X(b.x) + ',' + Y(b.hi); });
        var dn = s.band.slice().reverse().map(function (b) { return X(b.x) + ',' + Y(b.lo); });
        svg.appendChild(sv('polygon', { points: up.concat(dn).join(' '), fill: color, 'fill-opacity': 0.12, stroke: 'none' }));
      }
      if (!s.points.length) return;
      // A point with `brk` starts a new piece: no line is drawn through rounds without a record.
      var d = s.points.map(function (p, j) { return (j && !p.brk ? 'L' : 'M') + X(p.x).toFixed(1) + ' ' + Y(p.y).toFixed(1); }).join('');
      var lastP = s.points[s.points.length - 1];
      svg.appendChild(sv('path', { d: d, fill: 'none', stroke: color, 'stroke-width': s.width || 2, 'stroke-dasharray': dash || null, class: 'series',
        'data-label': s.short || s.label, 'data-last-x': lastP.x }));
      s.points.forEach(function (p) {
        if (!p.mark) return;
        var mk = sv('text', { x: X(p.x), y: Y(p.y) - 6, class: 'point-mark', 'text-anchor': 'middle', fill: color });
        mk.textContent = p.mark; svg.appendChild(mk);
      });
      var last = s.points[s.points.length - 1];
      ends.push({ y: Y(last.y), x: X(last.x), label: s.short || s.label, color: color });
    });
    // End labels, pushed apart so they stay readable.
    ends.sort(function (a, b) { return a.y - b.y; });
    for (var k = 1; k < ends.length; k++) if (ends[k].y - ends[k - 1].y < 11) ends[k].y = ends[k - 1].y + 11;
    ends.forEach(function (e) {
      var t = sv('text', { x: e.x + 5, y: e.y + 4, class: 'end-label', fill: e.color }); t.textContent = e.label; svg.appendChild(t);
    });
    var guide = sv('line', { y1: m.t, y2: H - m.b, class: 'guide', visibility: 'hidden' });
    svg.appendChild(guide);
    var overlay = sv('rect', { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, fill: 'transparent' });
    svg.appendChild(overlay);
    var allX = xs.filter(function (v, i, a) { return a.indexOf(v) === i; }).sort(function (a, b) { return a - b; });
    var cur = -1;
    // The tooltip's lines at x value xv: one per series, `missing(xv)` (e.g. "inactive")
    // for a series without a point there.
    function linesAt(xv) {
      var lines = [(opts.xName ? opts.xName(xv) : (opts.xLabel || 'x') + ' ' + xv)];
      series.forEach(function (s) {
        var hit = false;
        s.points.forEach(function (p) { if (p.x === xv) { hit = true; lines.push(p.info ? p.info : s.label + ': ' + fmt(p.y)); } });
        if (!hit && s.missing) { var t = s.missing(xv); if (t) lines.push(t); }
      });
      return lines;
    }
    host.linesAt = linesAt;
    function at(idx, cx, cy) {
      cur = idx;
      var xv = allX[idx];
      guide.setAttribute('x1', X(xv)); guide.setAttribute('x2', X(xv)); guide.setAttribute('visibility', 'visible');
      var lines = linesAt(xv);
      var r = svg.getBoundingClientRect();
      showTip(lines, cx !== undefined ? cx : r.left + X(xv) * r.width / W, cy !== undefined ? cy : r.top + m.t);
    }
    svg.addEventListener('mousemove', function (ev) {
      var r = svg.getBoundingClientRect();
      var vx = x0 + ((ev.clientX - r.left) * W / r.width - m.l) / (W - m.l - m.r) * (x1 - x0);
      var best = 0;
      allX.forEach(function (v, i) { if (Math.abs(v - vx) < Math.abs(allX[best] - vx)) best = i; });
      at(best, ev.clientX, ev.clientY);
    });
    svg.addEventListener('mouseleave', function () { guide.setAttribute('visibility', 'hidden'); hideTip(); });
    svg.addEventListener('keydown', function (ev) {
      if (ev.key === 'ArrowRight' || ev.key === 'ArrowLeft') {
        ev.preventDefault();
        var n = cur < 0 ? 0 : Math.max(0, Math.min(allX.length - 1, cur + (ev.key === 'ArrowRight' ? 1 : -1)));
        at(n);
      } else if (ev.key === 'Home') { ev.preventDefault(); at(0); }
      else if (ev.key === 'End') { ev.preventDefault(); at(allX.length - 1); }
      else if (ev.key === 'Escape') { hideTip(); guide.setAttribute('visibility', 'hidden'); }
    });
    svg.addEventListener('blur', function () { hideTip(); guide.setAttribute('visibility', 'hidden'); });
    host.appendChild(svg);
    var legend = el('ul', { cls: 'legend', 'aria-label': 'Legend' });
    series.forEach(function (s, i) {
      var color = s.color || COLORS[i % COLORS.length];
      var dash = s.dash !== undefined ? s.dash : DASHES[i % DASHES.length];
      var sw = sv('svg', { width: 34, height: 10, 'aria-hidden': 'true' });
      sw.appendChild(sv('line', { x1: 1, x2: 33, y1: 5, y2: 5, stroke: color, 'stroke-width': s.width || 2, 'stroke-dasharray': dash || null }));
      var li = el('li', null); li.appendChild(sw); li.appendChild(document.createTextNode(' ' + s.label));
      legend.appendChild(li);
    });
    host.appendChild(legend);
  }

  // Interval chart: rows [{label, rate, lo, hi, n, note}], horizontal bars with whiskers.
  // A bar with its 95 % interval per row. Wide: the label left of the bar,
  // the value right of it. Narrow (under 560 px): the label, then the value,
  // then the bar across the whole width, so nothing is cut.
  function intervalChart(host, rows, title) {
    clear(host);
    var W = Math.max(300, host.clientWidth || 800), narrow = W < 560;
    var rowH = narrow ? 50 : 26;
    var m = narrow ? { l: 14, r: 20, t: 10, b: 34 } : { l: Math.min(190, W * 0.3), r: Math.min(200, W * 0.32), t: 10, b: 34 };
    var H = m.t + m.b + rows.length * rowH;
    var X = function (v) { return m.l + v * (W - m.l - m.r); };
    var svg = sv('svg', { viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, class: 'chart-svg', role: 'img', 'aria-label': title });
    chartTitle(host, title);
    [0, 0.25, 0.5, 0.75, 1].forEach(function (v) {
      svg.appendChild(sv('line', { x1: X(v), x2: X(v), y1: m.t, y2: H - m.b, class: 'grid' }));
      var tt = sv('text', { x: X(v), y: H - m.b + 16, class: 'tick x-tick', 'text-anchor': 'middle' }); tt.textContent = (v * 100) + '%'; svg.appendChild(tt);
    });
    var fits = [];
    rows.forEach(function (r, i) {
      var top = m.t + i * rowH;
      var y = narrow ? top + 38 : top + rowH / 2;
      var value = fmt(r.rate * 100, 1) + '% [' + fmt(r.lo * 100, 1) + '–' + fmt(r.hi * 100, 1) + '] n=' + r.n + (r.note || '');
      var lab, v;
      if (narrow) {
        lab = sv('text', { x: m.l, y: top + 12, class: 'tick bar-label' });
        v = sv('text', { x: m.l, y: top + 25, class: 'tick' });
        fits.push([lab, W - m.l - 4], [v, W - m.l - 4]);
      } else {
        lab = sv('text', { x: m.l - 8, y: y + 4, class: 'tick bar-label', 'text-anchor': 'end' });
        v = sv('text', { x: W - m.r + 6, y: y + 4, class: 'tick' });
        fits.push([lab, m.l - 12], [v, m.r - 10]);
      }
      lab.textContent = r.label; svg.appendChild(lab);
      v.textContent = value; svg.appendChild(v);
      svg.appendChild(sv('rect', { x: X(0), y: y - 7, width: Math.max(0, X(r.rate) - X(0)), height: 14, class: 'bar' }));
      svg.appendChild(sv('line', { x1: X(r.lo), x2: X(r.hi), y1: y, y2: y, class: 'whisker' }));
      svg.appendChild(sv('line', { x1: X(r.lo), x2: X(r.lo), y1: y - 5, y2: y + 5, class: 'whisker' }));
      svg.appendChild(sv('line', { x1: X(r.hi), x2: X(r.hi), y1: y - 5, y2: y + 5, class: 'whisker' }));
    });
    host.appendChild(svg);
    // Whatever still does not fit is shortened, its whole text kept in a tooltip.
    fits.forEach(function (f) {
      var full = f[0].textContent;
      fitText(f[0], f[1]);
      if (f[0].textContent !== full) { var tip = sv('title'); tip.textContent = full; f[0].appendChild(tip); }
    });
  }

  function selftestQuery() {
    var m = /^#selftest=(.*)$/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  }

  if (D.kind === 'race') { racePage(); return; }
  societyPage();

  // ---------- Energy Society page ----------
  function societyPage() {
    var conds = D.conditions;
    var state = { ci: 0 };
    var callCache = {};
    var lower = null;

    function cond() { return conds[state.ci]; }
    function calls(ci, ri) {
      var key = ci + '-' + ri;
      if (!callCache[key]) {
        var node = document.getElementById('joule-calls-' + key);
        callCache[key] = node ? JSON.parse(node.textContent) : [];
      }
      return callCache[key];
    }
    var text = linesText;

    // Condition pickers (comparison pages hold two conditions).
    if (conds.length > 1) {
      Array.prototype.forEach.call(document.querySelectorAll('.cond-pick'), function (l) { l.hidden = false; });
      Array.prototype.forEach.call(document.querySelectorAll('.cond-select'), function (s) {
        conds.forEach(function (c, i) { s.appendChild(opt(i, 'ABCD'.charAt(i) + ': ' + c.label, i === 0)); });
        s.addEventListener('change', function () {
          state.ci = +s.value;
          Array.prototype.forEach.call(document.querySelectorAll('.cond-select'), function (o) { o.value = s.value; });
          fillPickers(); drawEnergy(); drawTimeline(); renderCalls();
        });
      });
    }

    var energyRun = document.getElementById('energy-run'), energyAgent = document.getElementById('energy-agent');
    var tlRun = document.getElementById('timeline-run');
    var cRun = document.getElementById('calls-run'), cRound = document.getElementById('calls-round');
    var cPhase = document.getElementById('calls-phase'), cAgent = document.getElementById('calls-agent');
    var cSearch = document.getElementById('calls-search'), cAll = document.getElementById('calls-all-runs');

    function runLabel(r) { return r.id + ' (seed ' + r.seed + ')'; }
    function fillPickers() {
      var c = cond();
      [energyRun, tlRun, cRun].forEach(function (s) {
        clear(s);
        c.runs.forEach(function (r, i) { s.appendChild(opt(i, runLabel(r), i === 0)); });
      });
      clear(energyAgent);
      c.agents.forEach(function (a, i) { energyAgent.appendChild(opt(i, a.id + ' (' + a.model + ')', i === 0)); });
      clear(cAgent).appendChild(opt('', 'all'));
      c.agents.forEach(function (a) { cAgent.appendChild(opt(a.id, a.id)); });
      clear(cRound).appendChild(opt('', 'all'));
      var maxR = 0;
      c.runs.forEach(function (r) { if (r.max_rounds > maxR) maxR = r.max_rounds; });
      for (var i = 1; i <= maxR; i++) cRound.appendChild(opt(i, String(i)));
    }

    function spent(rc) { return rc.sp[0] + rc.sp[1] + rc.sp[2]; }
    function actionText(rc) {
      var s = rc.a;
      if (rc.job) s += ' ' + rc.job;
      if (rc.to) s += ' → ' + rc.to + (rc.amt !== undefined ? ' ' + fmt(rc.amt) : '');
      if (rc.sab) s += ' ' + rc.sab;
      return s;
    }
    // The last round any agent of the run has a record of.
    function lastRound(run) {
      var r = 0;
      run.agents.forEach(function (a) { a.rounds.forEach(function (rc) { if (rc.r > r) r = rc.r; }); });
      return r;
    }
    // An agent's energy points: one per recorded round. A round without a
    // record (the agent inactive) breaks the line instead of being drawn
    // through; after the agent's last record the line drops to its final
    // energy in the round it went inactive and ends there (the tooltip says
    // "inactive" for the rounds after). An agent active to the end gets the
    // final energy as its last point.
    function agentPoints(run, ag) {
      var pts = [], prev = null;
      ag.rounds.forEach(function (rc) {
        if (rc.e === undefined) { prev = null; return; }
        pts.push({ x: rc.r, y: rc.e, brk: prev === null || rc.r !== prev + 1,
          info: ag.id + ': ' + fmt(rc.e) + ' · ' + actionText(rc) + ' · charge ' + fmt(spent(rc)) + (rc.rw ? ' · reward ' + fmt(rc.rw) : '') });
        prev = rc.r;
      });
      var lastR = ag.rounds.length ? ag.rounds[ag.rounds.length - 1].r : 0;
      var ended = lastR < lastRound(run) || (lastR < run.max_rounds && ag.final <= 0);
      if (ended) {
        pts.push({ x: lastR + 1, y: ag.final, brk: prev !== lastR,
          info: ag.id + ': inactive from round ' + (lastR + 1) + ' (energy ' + fmt(ag.final) + '; no record after round ' + lastR + ')' });
      } else {
        pts.push({ x: Math.max(lastR, run.max_rounds) + 1, y: ag.final, brk: prev !== lastR, info: ag.id + ': final ' + fmt(ag.final) });
      }
      return pts;
    }
    function inactiveAt(prefix) {
      return function (x) { return x >= 1 ? prefix + ': inactive' : null; };
    }
    function drawEnergy() {
      var c = cond(), run = c.runs[+energyRun.value || 0];
      if (!run) return;
      var endX = run.max_rounds + 1;
      var xName = function (v) { return v >= endX ? 'End (final energy)' : 'Round ' + v + ' (start)'; };
      lineChart(document.getElementById('chart-run'), run.agents.map(function (ag) {
        return { label: ag.id + ' (' + modelOf(c, ag.id) + ')', short: ag.id, points: agentPoints(run, ag), missing: inactiveAt(ag.id) };
      }), { title: 'Energy per agent, ' + run.id + ' (seed ' + run.seed + ')', xLabel: 'round', yLabel: 'energy', integerX: true, xName: xName,
        xFmt: function (v) { return v >= endX ? 'end' : String(v); } });
      var ai = +energyAgent.value || 0, agent = c.agents[ai];
      if (!agent) return;
      var series = c.runs.map(function (r) {
        var ag = r.agents.filter(function (a) { return a.id === agent.id; })[0];
        return { label: r.id + ' (seed ' + r.seed + ')', short: r.id, missing: inactiveAt(r.id + ' ' + agent.id),
          points: ag ? agentPoints(r, ag).map(function (p) { return { x: p.x, y: p.y, brk: p.brk, info: r.id + ' ' + p.info }; }) : [] };
      });
      var mean = c.mean.filter(function (m) { return m[0] === agent.id; })[0];
      if (mean) {
        var pts = mean[1].filter(function (p) { return p[1] !== null; });
        series.push({ label: 'mean over runs (± std band)', short: 'mean', color: '#000', dash: '', width: 3.5,
          points: pts.map(function (p) { return { x: p[0], y: p[1], info: 'mean: ' + fmt(p[1]) + (p[2] !== null ? ' ± ' + fmt(p[2]) : '') }; }),
          band: pts.filter(function (p) { return p[2] !== null; }).map(function (p) { return { x: p[0], lo: Math.max(0, p[1] - p[2]), hi: p[1] + p[2] }; }) });
      }
      var endA = 0; c.runs.forEach(function (r) { endA = Math.max(endA, r.max_rounds + 1); });
      lineChart(document.getElementById('chart-agent'), series, { title: 'Energy of ' + agent.id + ' (' + agent.model + ') in every run', xLabel: 'round', yLabel: 'energy', integerX: true,
        xFmt: function (v) { return v >= endA ? 'end' : String(v); },
        xName: function (v) { return v >= endA ? 'End (final energy)' : 'Round ' + v + ' (start)'; } });
    }
    function modelOf(c, id) {
      var a = c.agents.filter(function (x) { return x.id === id; })[0];
      return a ? a.model : '';
    }

    function voteText(v) {
      return v.map(function (x) {
        var act = x[1] === 'ATTEMPT_JOB' ? (x[2] || 'job?') : x[1] === 'DONATE' ? 'D→' + short(x[2]) + (x[3] !== null ? ' ' + fmt(x[3], 0) : '') :
          x[1] === 'SABOTAGE_JOB' ? 'SAB ' + x[2] : x[1];
        return short(x[0]) + ':' + act;
      }).join(' ');
    }
    function drawTimeline() {
      var c = cond(), ri = +tlRun.value || 0, run = c.runs[ri], host = document.getElementById('timeline-table');
      clear(host);
      if (!run) return;
      var table = el('table', { cls: 'timeline', id: 'timeline-grid' });
      table.appendChild(el('caption', { text: run.id + ' (seed ' + run.seed + '): every agent\'s round' }));
      var hr = el('tr', null, el('th', { scope: 'col', text: 'Round' }));
      run.agents.forEach(function (a) { hr.appendChild(el('th', { scope: 'col' }, a.id, el('br'), el('span', { cls: 'model', text: modelOf(c, a.id) }))); });
      table.appendChild(el('thead', null, hr));
      var body = el('tbody');
      var maxR = 0;
      run.agents.forEach(function (a) { a.rounds.forEach(function (rc) { if (rc.r > maxR) maxR = rc.r; }); });
      for (var r = 1; r <= maxR; r++) {
        var tr = el('tr', null, el('th', { scope: 'row', text: String(r) }));
        run.agents.forEach(function (a) {
          var rc = a.rounds.filter(function (x) { return x.r === r; })[0];
          var td = el('td');
          if (!rc) { td.className = 'inactive'; td.textContent = '—'; tr.appendChild(td); return; }
          if (rc.a === 'INACTIVE') td.className = 'inactive';
          var dec = el('div', { cls: 'dec' }, el('strong', { text: rc.a.replace('_JOB', '') }));
          if (rc.job) dec.appendChild(document.createTextNode(' ' + rc.job + (rc.diff ? ' (' + rc.diff + ', ' + fmt(rc.jr, 0) + ')' : '')));
          if (rc.ok === true) dec.appendChild(el('span', { cls: 'ok', title: 'graded correct', text: ' ✓ correct' }));
          if (rc.ok === false) dec.appendChild(el('span', { cls: 'bad', title: 'graded wrong', text: ' ✗ wrong' }));
          if (rc.to) dec.appendChild(document.createTextNode(' → ' + rc.to + (rc.amt !== undefined ? ': ' + fmt(rc.amt) : '')));
          td.appendChild(dec);
          if (rc.rw) td.appendChild(el('div', { cls: 'rw', text: 'reward +' + fmt(rc.rw) }));
          if (rc.sab) td.appendChild(el('div', { cls: 'sab', text: 'sabotage ' + rc.sab + (rc.sok === true ? ' (succeeded' : rc.sok === false ? ' (failed' : ' (') + (rc.hit && rc.hit.length ? ', hit ' + rc.hit.join(', ') : '') + ')' }));
          (rc.rcv || []).forEach(function (d) { td.appendChild(el('div', { cls: 'rcv', text: 'received ' + fmt(d[1]) + ' from ' + d[0] })); });
          if (rc.vote && rc.vote.length) td.appendChild(el('div', { cls: 'vote', title: 'this agent\'s vote: recommendations by agent number', text: 'vote ' + voteText(rc.vote) }));
          (rc.err || []).forEach(function (e) { td.appendChild(el('div', { cls: 'err', text: '⚠ ' + e })); });
          var meta = el('div', { cls: 'meta', text: (rc.e !== undefined ? 'E ' + fmt(rc.e, 0) + ' · ' : '') + 'spent ' + fmt(spent(rc)) + ' ' });
          // Only a round with recorded calls links to them (an inactive round has none).
          var nc = rc.nc || 0;
          if (!nc) { td.appendChild(meta); tr.appendChild(td); return; }
          var link = el('a', { href: '#calls', cls: 'calls-link', 'data-round': r, 'data-agent': a.id, text: nc + (nc === 1 ? ' call' : ' calls'),
            'aria-label': nc + (nc === 1 ? ' call' : ' calls') + ' of ' + a.id + ' in round ' + r });
          link.addEventListener('click', (function (agent, round) {
            return function (ev) {
              ev.preventDefault();
              cRun.value = ri; cRound.value = round; cAgent.value = agent; cPhase.value = ''; cSearch.value = ''; cAll.checked = false;
              renderCalls();
              document.getElementById('calls').scrollIntoView();
              var first = document.querySelector('#call-list button');
              if (first) first.focus();
            };
          })(a.id, r));
          meta.appendChild(link);
          td.appendChild(meta);
          tr.appendChild(td);
        });
        body.appendChild(tr);
      }
      table.appendChild(body);
      host.appendChild(table);
    }

    // ----- call browser -----
    var shownLimit = 200;
    var lastQuery = null, lineHits = null;
    function lineMatches(q) {
      if (q === lastQuery) return lineHits;
      if (!lower) lower = lineTable().map(function (l) { return l.toLowerCase(); });
      lineHits = new Set();
      for (var i = 0; i < lower.length; i++) if (lower[i].indexOf(q) >= 0) lineHits.add(i);
      lastQuery = q;
      return lineHits;
    }
    function callMatches(cl, q, hits) {
      if (cl.out.toLowerCase().indexOf(q) >= 0) return 'output';
      if (cl.th && cl.th.toLowerCase().indexOf(q) >= 0) return 'thinking';
      var multi = q.indexOf('\n') >= 0;
      var msgs = cl.msgs || [];
      for (var i = 0; i < msgs.length; i++) {
        if (multi ? text(msgs[i][1]).toLowerCase().indexOf(q) >= 0 : expand(msgs[i][1]).some(function (id) { return hits.has(id); })) return 'prompt';
      }
      if (cl.rp && (multi ? text(cl.rp).toLowerCase().indexOf(q) >= 0 : expand(cl.rp).some(function (id) { return hits.has(id); }))) return 'rendered prompt';
      return null;
    }
    function findCalls() {
      var c = cond(), q = cSearch.value.trim().toLowerCase();
      var runs = cAll.checked ? c.runs.map(function (_, i) { return i; }) : [+cRun.value || 0];
      var round = cRound.value ? +cRound.value : null, phase = cPhase.value, agent = cAgent.value;
      var hits = q ? lineMatches(q) : null, out = [];
      runs.forEach(function (ri) {
        calls(state.ci, ri).forEach(function (cl, k) {
          if (round !== null && cl.r !== round) return;
          if (phase && cl.ph !== phase) return;
          if (agent && cl.ag !== agent) return;
          var where = q ? callMatches(cl, q, hits) : '';
          if (where === null) return;
          out.push({ ri: ri, k: k, cl: cl, where: where });
        });
      });
      return out;
    }
    function callLabel(run, cl) {
      return run.id + ' · round ' + cl.r + ' · ' + cl.ph + ' · ' + cl.ag + (cl.i ? ' · call ' + (cl.i + 1) : '');
    }
    var current = [];
    function renderCalls() {
      var c = cond(), list = document.getElementById('call-list'), status = document.getElementById('calls-status');
      current = findCalls();
      clear(list);
      current.slice(0, shownLimit).forEach(function (m, idx) {
        var run = c.runs[m.ri], cl = m.cl;
        var b = el('button', { type: 'button', 'data-idx': idx, cls: 'call-item' },
          el('span', { cls: 'call-where', text: callLabel(run, cl) }),
          el('span', { cls: 'call-facts', text: (cl.ct !== undefined ? cl.ct + ' tokens' : '') + (cl.ch !== undefined ? ' · charge ' + fmt(cl.ch) : '') + ' · ' + (cl.st && cl.st !== 'ok' ? cl.st + ' · ' : '') + 'parse ' + (cl.ps === 'ok' || cl.ps === 'recorded' ? cl.ps : 'error') + (m.where ? ' · match in ' + m.where : '') }));
        b.addEventListener('click', function () { showCall(idx); });
        b.addEventListener('keydown', function (ev) {
          if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
            ev.preventDefault();
            var n = list.querySelector('button[data-idx="' + (idx + (ev.key === 'ArrowDown' ? 1 : -1)) + '"]');
            if (n) { n.focus(); showCall(+n.getAttribute('data-idx')); }
          }
        });
        list.appendChild(el('li', null, b));
      });
      if (current.length > shownLimit) {
        var more = el('button', { type: 'button', cls: 'more', text: 'Show ' + Math.min(200, current.length - shownLimit) + ' more' });
        more.addEventListener('click', function () { shownLimit += 200; renderCalls(); });
        list.appendChild(el('li', null, more));
      }
      var q = cSearch.value.trim();
      status.textContent = current.length + ' call' + (current.length === 1 ? '' : 's') + (q ? ' matching “' + q + '”' : '') +
        (current.length > shownLimit ? ' (first ' + shownLimit + ' listed)' : '') + '.';
      if (current.length) showCall(0); else clear(document.getElementById('call-detail'));
    }
    function marked(textValue, q) {
      var pre = el('pre');
      if (!q) { pre.textContent = textValue; return pre; }
      var lo = textValue.toLowerCase(), pos = 0, i;
      while ((i = lo.indexOf(q, pos)) >= 0) {
        pre.appendChild(document.createTextNode(textValue.slice(pos, i)));
        pre.appendChild(el('mark', { text: textValue.slice(i, i + q.length) }));
        pos = i + q.length;
      }
      pre.appendChild(document.createTextNode(textValue.slice(pos)));
      return pre;
    }
    function pretty(s) {
      var t = s.trim();
      if (t.charAt(0) === '{' || t.charAt(0) === '[') { try { return JSON.stringify(JSON.parse(t), null, 2); } catch (e) { /* not JSON: raw */ } }
      return s;
    }
    function showCall(idx) {
      var m = current[idx];
      var det = clear(document.getElementById('call-detail'));
      if (!m) return;
      Array.prototype.forEach.call(document.querySelectorAll('#call-list button.call-item'), function (b) {
        b.setAttribute('aria-current', b.getAttribute('data-idx') === String(idx) ? 'true' : 'false');
      });
      var c = cond(), run = c.runs[m.ri], cl = m.cl, q = cSearch.value.trim().toLowerCase();
      det.appendChild(el('h3', { text: callLabel(run, cl) }));
      var facts = el('dl', { cls: 'facts' });
      function fact(k, v) { if (v !== undefined && v !== null && v !== '') { facts.appendChild(el('dt', { text: k })); facts.appendChild(el('dd', { text: String(v) })); } }
      fact('Status', cl.st);
      fact('Parse', cl.ps);
      fact('Backend error', cl.be);
      fact('Prompt tokens', cl.pt);
      fact('Generated tokens', cl.gt);
      fact('Thinking tokens', cl.tt);
      fact(run.source === 'events' ? 'Charged tokens' : 'Output tokens (token_usage.json)', cl.ct);
      fact(run.source === 'events' ? 'Charge' : 'Phase spend (agents.json)', cl.ch !== undefined ? fmt(cl.ch) : undefined);
      if (cl.eb !== undefined) fact('Energy', fmt(cl.eb) + ' → ' + fmt(cl.ea));
      if (cl.src) fact('Counts from', Object.keys(cl.src).map(function (k) { return k + ': ' + cl.src[k]; }).join('; '));
      det.appendChild(facts);
      if (run.source !== 'events') {
        det.appendChild(el('p', { cls: 'note', text: 'This is a reference run: its transcript records the reasoning and the structured response of each invocation, not the prompts or the raw text.' }));
      }
      (cl.msgs || []).forEach(function (mm) {
        det.appendChild(el('h4', { text: 'Prompt: ' + mm[0] }));
        det.appendChild(marked(text(mm[1]), q));
      });
      if (cl.rp) {
        var dd = el('details', null, el('summary', { text: 'Rendered prompt (chat template applied)' }));
        dd.appendChild(marked(text(cl.rp), q));
        det.appendChild(dd);
      }
      if (cl.th) { det.appendChild(el('h4', { text: 'Thinking' })); det.appendChild(marked(cl.th, q)); }
      det.appendChild(el('h4', { text: run.source === 'events' ? 'Raw output' : 'Structured response' }));
      det.appendChild(marked(pretty(cl.out), q));
    }

    var searchTimer = null;
    cSearch.addEventListener('input', function () { clearTimeout(searchTimer); searchTimer = setTimeout(function () { shownLimit = 200; renderCalls(); }, 180); });
    [cRun, cRound, cPhase, cAgent, cAll].forEach(function (s) { s.addEventListener('change', function () { shownLimit = 200; renderCalls(); }); });
    energyRun.addEventListener('change', drawEnergy);
    energyAgent.addEventListener('change', drawEnergy);
    tlRun.addEventListener('change', drawTimeline);

    // Comparison chart: the mean energy of one agent in A and in B.
    var cmpAgent = document.getElementById('cmp-agent');
    function drawCompare() {
      if (!cmpAgent || conds.length < 2) return;
      var id = cmpAgent.value;
      var series = [0, 1].map(function (i) {
        var mean = conds[i].mean.filter(function (m) { return m[0] === id; })[0];
        var pts = mean ? mean[1].filter(function (p) { return p[1] !== null; }) : [];
        return { label: 'ABCD'.charAt(i) + ': ' + conds[i].label, short: 'ABCD'.charAt(i), dash: i ? '7 4' : '', color: COLORS[i],
          points: pts.map(function (p) { return { x: p[0], y: p[1], info: 'ABCD'.charAt(i) + ' mean: ' + fmt(p[1]) + (p[2] !== null ? ' ± ' + fmt(p[2]) : '') }; }) };
      });
      lineChart(document.getElementById('chart-compare'), series, { title: 'Mean energy of ' + id, xLabel: 'round', yLabel: 'energy', integerX: true });
    }
    if (cmpAgent && conds.length > 1) {
      conds[0].agents.forEach(function (a, i) { cmpAgent.appendChild(opt(a.id, a.id + ' (' + a.model + ')', i === 0)); });
      cmpAgent.addEventListener('change', drawCompare);
    }

    fillPickers();
    drawEnergy();
    drawTimeline();
    drawCompare();
    renderCalls();
    // Time from navigation start to the drawn page (before any search).
    var readyMs = Math.round(performance.now());
    var q = selftestQuery();
    if (q !== null) { cSearch.value = q; cAll.checked = true; renderCalls(); }
    var resizeTimer = null;
    window.addEventListener('resize', function () { clearTimeout(resizeTimer); resizeTimer = setTimeout(function () { drawEnergy(); drawCompare(); }, 200); });
    if (q !== null) {
      var first = current[0];
      var det = document.getElementById('call-detail');
      writeSelftest({
        query: q,
        hits: current.length,
        first: first ? { run: cond().runs[first.ri].id, round: first.cl.r, phase: first.cl.ph, agent: first.cl.ag, where: first.where } : null,
        detail_has_query: det.textContent.toLowerCase().indexOf(q.toLowerCase()) >= 0,
        marks: det.querySelectorAll('mark').length,
        chart_run_lines: document.querySelectorAll('#chart-run path.series').length,
        chart_agent_lines: document.querySelectorAll('#chart-agent path.series').length,
        timeline_rows: document.querySelectorAll('#timeline-grid tbody tr').length,
        runs: cond().runs.length,
        energy: energySelftest(),
        timeline_links: timelineSelftest(),
        layout: layoutSelftest(),
        ready_ms: readyMs,
        search_ms: Math.round(performance.now() - readyMs)
      });
    }
  }

  // For the self-test: every run's energy chart drawn in turn, each line's
  // last x, its number of pieces and the tooltip at the run's last round.
  function energySelftest() {
    var sel = document.getElementById('energy-run'), keep = sel.value, out = [];
    var c = D.conditions[0];
    for (var ri = 0; ri < c.runs.length; ri++) {
      sel.value = ri; sel.dispatchEvent(new Event('change'));
      var host = document.getElementById('chart-run');
      var lines = Array.prototype.map.call(host.querySelectorAll('path.series'), function (p) {
        return { agent: p.getAttribute('data-label'), last_x: +p.getAttribute('data-last-x'), pieces: (p.getAttribute('d').match(/M/g) || []).length };
      });
      out.push({ run: c.runs[ri].id, lines: lines, tip: host.linesAt ? host.linesAt(c.runs[ri].max_rounds) : [] });
    }
    sel.value = keep; sel.dispatchEvent(new Event('change'));
    return out;
  }
  // For the self-test: every timeline link of the shown run, with the number
  // of calls it names and the number the run's call records hold.
  function timelineSelftest() {
    var ri = +document.getElementById('timeline-run').value || 0;
    var node = document.getElementById('joule-calls-0-' + ri);
    var calls = node ? JSON.parse(node.textContent) : [];
    var cells = document.querySelectorAll('#timeline-grid tbody td').length;
    return { cells: cells, links: Array.prototype.map.call(document.querySelectorAll('#timeline-grid a.calls-link'), function (a) {
      var r = +a.getAttribute('data-round'), ag = a.getAttribute('data-agent');
      return { text: a.textContent, calls: calls.filter(function (c) { return c.r === r && c.ag === ag; }).length };
    }) };
  }
  // For the self-test: the viewport width, the header's height, where each
  // section a navigation link jumps to lands (its heading and first controls
  // below the header), and x-axis labels that overlap.
  function layoutSelftest() {
    var header = document.querySelector('header');
    var targets = Array.prototype.map.call(document.querySelectorAll('nav a[href^="#"]'), function (a) {
      var t = document.getElementById(a.getAttribute('href').slice(1));
      if (!t) return { id: a.getAttribute('href'), missing: true };
      t.scrollIntoView();
      var hb = Math.max(0, header.getBoundingClientRect().bottom);
      var h = t.querySelector('h2') || t, ctl = t.querySelector('.controls');
      return { id: t.id, header_bottom: hb, heading_top: h.getBoundingClientRect().top,
        controls_top: ctl ? ctl.getBoundingClientRect().top : null };
    });
    window.scrollTo(0, 0);
    var overlaps = 0, labels = 0;
    Array.prototype.forEach.call(document.querySelectorAll('svg.chart-svg'), function (svg) {
      var rs = Array.prototype.map.call(svg.querySelectorAll('text.x-tick'), function (t) { return t.getBoundingClientRect(); })
        .filter(function (r) { return r.width > 0; }).sort(function (a, b) { return a.left - b.left; });
      labels += rs.length;
      for (var i = 1; i < rs.length; i++) if (rs[i].left < rs[i - 1].right + 2) overlaps++;
    });
    // Chart texts cut by their chart's edge.
    var clipped = [];
    Array.prototype.forEach.call(document.querySelectorAll('svg.chart-svg'), function (svg) {
      var box = svg.getBoundingClientRect();
      Array.prototype.forEach.call(svg.querySelectorAll('text'), function (t) {
        var r = t.getBoundingClientRect();
        if (r.width > 0 && (r.left < box.left - 0.5 || r.right > box.right + 0.5)) clipped.push(t.textContent);
      });
    });
    // Elements and text runs that reach past the screen's right edge outside
    // a scroller, so a failing width check names its culprit.
    var wide = [], items = Array.prototype.map.call(document.body.querySelectorAll('*'), function (el) {
      return { rect: el.getBoundingClientRect(), el: el, from: el.parentElement };
    });
    var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (var n = walker.nextNode(); n; n = walker.nextNode()) {
      var rg = document.createRange();
      rg.selectNodeContents(n);
      items.push({ rect: rg.getBoundingClientRect(), el: n.parentElement, from: n.parentElement });
    }
    items.forEach(function (it) {
      if (it.rect.right <= window.innerWidth + 0.5 || wide.length >= 8) return;
      for (var p = it.from; p && p !== document.body; p = p.parentElement) {
        var ox = getComputedStyle(p).overflowX;
        if (ox === 'auto' || ox === 'scroll' || ox === 'hidden') return;
      }
      var el = it.el;
      wide.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + ' right=' + Math.round(it.rect.right) + ': ' + (el.textContent || '').slice(0, 40));
    });
    return { width: window.innerWidth, page_width: document.documentElement.scrollWidth, header_height: header.getBoundingClientRect().height,
      targets: targets, x_labels: labels, x_label_overlaps: overlaps, clipped_texts: clipped, too_wide: wide };
  }

  function writeSelftest(obj) {
    obj.errors = errors.slice();
    var out = document.getElementById('selftest-result');
    out.textContent = JSON.stringify(obj);
    out.hidden = false;
  }

  // ---------- race page ----------
  function racePage() {
    var tables = D.tables;
    var host = document.getElementById('rate-charts');
    function rowsOf(t) {
      return t.rows.map(function (r) {
        return { label: r.group.map(function (g) { return g[0] + '=' + g[1]; }).join(', '), rate: r.unsafe_rate, lo: r.ci_low, hi: r.ci_high, n: r.decisions, note: r.decisions < 20 ? ' †' : '' };
      });
    }
    function drawRates() {
      clear(host);
      tables.filter(function (t) { return t.chart; }).forEach(function (t) {
        var div = el('div', { cls: 'chart' });
        host.appendChild(div);
        intervalChart(div, rowsOf(t), t.title + ' (95% Wilson intervals)');
      });
    }
    var races = D.races, pick = document.getElementById('race-pick'), filter = document.getElementById('race-filter');
    function fillRaces() {
      var f = filter.value.trim().toLowerCase();
      clear(pick);
      races.forEach(function (r, i) {
        var label = r.game_id + ' · ' + r.lineup + ' · p_max ' + r.p_max + ' · ' + r.persona + (r.contaminated ? ' · contaminated' : '');
        if (!f || label.toLowerCase().indexOf(f) >= 0) pick.appendChild(opt(i, label));
      });
    }
    function drawRace() {
      var r = races[+pick.value];
      var chart = document.getElementById('race-chart'), tbl = document.getElementById('race-turns');
      clear(tbl);
      if (!r) { clear(chart); return; }
      var series = r.players.map(function (p, pi) {
        var pts = [{ x: 0, y: 0, info: p + ': progress 0 (start)' }];
        r.turns.filter(function (t) { return t.p === pi; }).forEach(function (t) {
          pts.push({ x: t.r, y: t.after, mark: t.u ? 'U' : 'S', info: p + ': ' + t.a + ' → progress ' + fmt(t.after) + ' (' + t.pos + ' before' + (t.pf ? ', parse failed' : '') + ')' });
        });
        return { label: p + ' (' + (r.models[pi] || '') + ')', short: p, points: pts };
      });
      lineChart(chart, series, { title: 'Progress in ' + r.game_id + ' (' + r.result + '; U = UNSAFE, S = SAFE)', xLabel: 'round', yLabel: 'progress', integerX: true, yMin: 0 });
      var t = el('table', { cls: 'turns' });
      t.appendChild(el('caption', { text: 'Every turn of ' + r.game_id }));
      t.appendChild(el('thead', null, el('tr', null, el('th', { scope: 'col', text: 'Round' }), el('th', { scope: 'col', text: 'Player' }),
        el('th', { scope: 'col', text: 'Position' }), el('th', { scope: 'col', text: 'Action' }), el('th', { scope: 'col', text: 'Progress after' }),
        el('th', { scope: 'col', text: 'Reasoning, response and prompt' }))));
      var b = el('tbody');
      r.turns.forEach(function (tu) {
        var d = el('details', null, el('summary', { text: tu.reason ? tu.reason.slice(0, 90) + (tu.reason.length > 90 ? '…' : '') : 'details' }));
        if (tu.reason) { d.appendChild(el('h4', { text: 'Reasoning' })); d.appendChild(el('pre', { text: tu.reason })); }
        d.appendChild(el('h4', { text: 'Raw response' })); d.appendChild(el('pre', { text: tu.raw }));
        d.appendChild(el('h4', { text: 'Prompt' })); d.appendChild(el('pre', { text: linesText(tu.prompt) }));
        b.appendChild(el('tr', { cls: tu.u ? 'unsafe' : 'safe' }, el('td', { text: String(tu.r) }), el('td', { text: r.players[tu.p] }),
          el('td', { text: tu.pos }), el('td', null, el('strong', { text: tu.a }), tu.pf ? el('span', { cls: 'err', text: ' parse failed' }) : null),
          el('td', { cls: 'num', text: fmt(tu.after) }), el('td', null, d)));
      });
      t.appendChild(b);
      tbl.appendChild(t);
    }
    filter.addEventListener('input', function () { fillRaces(); drawRace(); });
    pick.addEventListener('change', drawRace);
    drawRates();
    fillRaces();
    drawRace();
    window.addEventListener('resize', function () { drawRates(); drawRace(); });
    var q = selftestQuery();
    if (q !== null) {
      writeSelftest({ query: q, rate_charts: host.querySelectorAll('svg').length, races: races.length,
        race_lines: document.querySelectorAll('#race-chart path.series').length,
        turn_rows: document.querySelectorAll('#race-turns tbody tr').length, layout: layoutSelftest() });
    }
  }
})();
