/* pmlab cycle timeline: draws the model dashboards/timeline.py embeds as
 * <script type="application/json" id="timeline-data"> into SVG.
 *
 * Every string from the guest (device and driver names, console lines,
 * pmtest records, reasons) reaches the DOM through textContent /
 * setAttribute only, never innerHTML. When drawn: <body data-drawn="ready"
 * data-rows="N" data-bars="N" data-failed-bars="N">; errors caught on the
 * page are counted in <body data-errors> and logged to the console.
 * The location hash may set the filter and pin one callback's tooltip:
 * #min-us=100&call=ROW.CALL (indices into the model's rows and their calls).
 */
(function () {
  'use strict';

  var SVG = 'http://www.w3.org/2000/svg';
  var LABEL = 330;      /* px, the device name column */
  var ROW = 15;         /* px per device row */
  var LANE = 13;        /* px per lane of the phase track */
  var AXIS = 20;        /* px, the tick labels */
  /* sleepgraph's phase colours */
  var PHASE_COLOURS = {
    dpm_prepare: '#ccffcc', dpm_suspend: '#88ff88', dpm_suspend_late: '#00aa00', dpm_suspend_noirq: '#008888',
    machine_suspend: '#0000ff', dpm_resume_noirq: '#ff9900', dpm_resume_early: '#ffcc00',
    dpm_resume: '#ffff88', dpm_complete: '#ffffcc'
  };
  var OTHER_COLOUR = '#b8c2d0';

  var errors = [];
  function pageError(message) {
    errors.push(String(message));
    if (document.body) document.body.dataset.errors = String(errors.length);
    console.error('pmlab timeline: ' + message);
  }
  window.addEventListener('error', function (event) { pageError(event.message || 'error'); });

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, String(attrs[key])); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function ms(value) { return value === null || value === undefined ? '\u2013' : value.toFixed(3) + ' ms'; }
  function duration(us) {
    if (us === null || us === undefined) return 'never returned';
    return us >= 1000 ? (us / 1000).toFixed(3) + ' ms' : us.toFixed(1) + ' \u00b5s';
  }
  function phaseColour(name) { return PHASE_COLOURS[name] || OTHER_COLOUR; }

  var data, state = {pxPerMs: null, minUs: 0, filter: ''};

  function callEnd(call) { return call.end_ms === null ? data.end_ms : call.end_ms; }
  function callClass(call) {
    if (call.failed) return 'bar failed';
    if (call.us === null) return 'bar unfinished';
    if (call.err) return 'bar err';
    return 'bar';
  }
  function interesting(row) {
    return row.failed || row.violations.length || row.pmtest.length || row.calls.some(function (c) {
      return c.us === null || c.err || c.violations.length || c.pmtest.length;
    });
  }
  function visibleRows() {
    var needle = state.filter.toLowerCase();
    var shown = data.rows.map(function (row) {
      if (needle && row.device.toLowerCase().indexOf(needle) < 0) return false;
      if (!state.minUs || interesting(row)) return true;
      return row.calls.some(function (c) { return c.us !== null && c.us >= state.minUs; });
    });
    /* a shown device keeps its ancestors' rows, so the grouping stays readable */
    shown.forEach(function (isShown, index) {
      for (var up = isShown ? data.rows[index].parent_row : null; up !== null && up !== undefined && !shown[up];
           up = data.rows[up].parent_row) shown[up] = 'ancestor';
    });
    return data.rows.map(function (row, index) { return {row: row, index: index, ancestor: shown[index] === 'ancestor'}; })
      .filter(function (item) { return shown[item.index]; });
  }

  /* ------------------------------------------------------------ header */

  function summary() {
    var c = data.cycle;
    document.getElementById('heading').textContent =
      'pmlab cycle timeline: run ' + c.run_id + ', cycle ' + c.cycle + ' (' + c.mode + ')';
    var parts = ['verdict ' + (c.verdict || data.state) + (c.phase ? ' in ' + c.phase : '')];
    if (c.expected_verdict && c.expected_verdict !== 'pass') parts.push('expected ' + c.expected_verdict);
    if ((data.injected || []).length) parts.push('fault injected: ' + data.injected.join(', '));
    if (data.no_trace) parts.push('no trace');
    else parts.push('suspend ' + ms(c.suspend_ms), 'resume ' + ms(c.resume_ms), 'trace span ' + ms(data.end_ms),
                    data.rows.length + ' devices');
    parts.push('started ' + c.host_start, 'report ' + (data.report || 'none'));
    document.getElementById('summary').textContent = parts.join(' \u00b7 ');
    if (data.dashboard) {
      document.getElementById('dashboard-link').setAttribute('href', data.dashboard);
      document.getElementById('back').hidden = false;
    }
  }

  /* An errno as the lab names it everywhere (lab.trace.errno_text): "EIO (-5)". */
  function errText(item) { return item.err_text || String(item.err); }

  /* A cycle the guest never reported on (a hang): what the host saw. */
  function hostSide() {
    var steps = data.host_steps || [], events = data.host_events || [];
    var list = document.getElementById('host-steps');
    steps.forEach(function (s) {
      list.appendChild(el('li', null, s[0] + (s[1] === null ? '' : ' at +' + s[1].toFixed(3) + ' s')));
    });
    events.forEach(function (e) { list.appendChild(el('li', null, 'libvirt event: ' + e.join(' '))); });
    if (data.hang_dump) {
      var link = document.getElementById('hang-dump-link');
      link.setAttribute('href', data.hang_dump);
      link.textContent = data.hang_dump.split('/').pop();
      document.getElementById('hang-dump').hidden = false;
    }
    if (steps.length || events.length || data.hang_dump) document.getElementById('host-section').hidden = false;
    if (data.no_trace) {
      document.getElementById('no-trace').textContent = data.no_trace;
      document.getElementById('no-trace-section').hidden = false;
      document.getElementById('timeline-section').hidden = true;
    }
  }

  function jump(rowIndex, callIndex) {
    var link = el('a', null, 'show');
    link.href = '#';
    link.addEventListener('click', function (event) {
      event.preventDefault();
      state.minUs = 0; state.filter = '';
      document.getElementById('min-us').value = '0';
      document.getElementById('device-filter').value = '';
      draw();
      var target = document.getElementById('row-' + rowIndex);
      var holder = document.getElementById('timeline');
      if (target) holder.scrollTop = Number(target.getAttribute('y')) - 40;
      var bar = callIndex === undefined ? null :
        document.querySelector('rect.bar[data-row="' + rowIndex + '"][data-call="' + callIndex + '"]');
      if (bar) { var box = bar.getBoundingClientRect(); showTip(rowIndex, callIndex, box.right, box.bottom); }
    });
    return link;
  }

  /* A hang's callback that started and never returned (lab/hang.py), with
     a link to its open bar when the hang dump's trace is drawn. */
  function stuckFinding(list) {
    var s = data.stuck;
    if (!s) return;
    var text = s.device
      ? 'never returned: ' + s.device + (s.driver ? ' (' + s.driver + ')' : '') + ' ' + (s.callback || '') +
        (s.since_s === null ? '' : ', started ' + s.since_s.toFixed(1) + ' s before the trace was dumped')
      : s.probe
        ? 'every device callback returned; the guest\'s probe of ' + s.probe +
          (s.probe_section === 'probes_before' ? ' before the suspend' : ' after the resume') + ' never finished'
        : 'a device callback never returned';
    if (s.function) text += ', stuck in ' + s.function + (s.probe && s.driver ? ' [' + s.driver + ']' : '') +
      (s.blocked_task ? ' (' + s.blocked_task + ')' : '');
    if (s.order) text += '; out of order: ' + s.order;
    var item = el('li', 'fail', text + ' (from ' + (s.source || 'the hang dump') + ') ');
    data.rows.forEach(function (row, index) {
      if (row.name !== s.device) return;
      row.calls.forEach(function (call, callIndex) {
        if (call.us === null && call.cb === s.callback) item.appendChild(jump(index, callIndex));
      });
    });
    list.appendChild(item);
  }

  function findings() {
    var list = document.getElementById('findings-list');
    var c = data.cycle;
    if ((data.injected || []).length)
      list.appendChild(el('li', null, 'fault injected: ' + data.injected.join(', ') +
        ' (on purpose: not the kernel\'s fail, left out of the pass rate)'));
    if (c.reason) list.appendChild(el('li', 'fail', 'reason: ' + c.reason));
    stuckFinding(list);
    data.rows.forEach(function (row, index) {
      row.calls.forEach(function (call, callIndex) {
        if (!call.failed) return;
        var item = el('li', 'fail', 'failed callback: ' + row.device + ' ' + call.cb + ' err=' + errText(call) +
          ' at ' + ms(call.start_ms) + ', took ' + duration(call.us) + ' ');
        item.appendChild(jump(index, callIndex));
        list.appendChild(item);
      });
    });
    if (!data.rows.length) {  /* no trace: the record's own account of its failing callbacks */
      data.failed_callbacks.forEach(function (f) {
        list.appendChild(el('li', 'fail', 'failed callback: ' + f.device + ' ' + (f.cb || '') + ' err=' + errText(f)));
      });
    }
    data.violations.forEach(function (v, number) {
      var item = el('li', 'violation', 'ordering violation ' + (number + 1) + ': ' + v.rule + ': ' + v.device +
        ': ' + v.message + ' ');
      var index = data.rows.findIndex(function (row) { return row.violations.indexOf(number) >= 0; });
      if (index >= 0) item.appendChild(jump(index));
      list.appendChild(item);
    });
    data.problems.forEach(function (line) { list.appendChild(el('li', null, 'console: ' + line)); });
    if (!list.firstChild) {
      list.appendChild(el('li', null, !data.state || data.state === 'pass' ? 'nothing: this cycle passed'
        : 'no reason recorded: the cycle is ' + data.state + (data.state === 'unfinished' ?
          ' (only its "started" line: the run stopped during it)' : '')));
    }
  }

  function legend() {
    var node = document.getElementById('legend');
    var seen = {};
    data.phases.forEach(function (p) {
      if (seen[p.name]) return;
      seen[p.name] = true;
      var item = el('span');
      var swatch = el('span', 'swatch');
      swatch.style.background = phaseColour(p.name);
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(p.name));
      node.appendChild(item);
    });
    [['#5470c6', 'callback'], ['#f9ab00', 'returned an error (not a failure)'], ['#d93025', 'failed callback'],
     ['#a142f4', 'never returned'], ['#000000', 'outlined: a pmtest record in the call'],
     ['#8430ce', '\u25bc oracle violation']].forEach(function (pair) {
      var item = el('span');
      var swatch = el('span', 'swatch');
      swatch.style.background = pair[0];
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(pair[1]));
      node.appendChild(item);
    });
  }

  function consoleLines() {
    var marked = {};
    data.rows.forEach(function (row) {
      if (row.failed || row.violations.length) row.console.forEach(function (line) { marked[line] = true; });
    });
    var list = document.getElementById('console');
    data.console.forEach(function (line) { list.appendChild(el('li', marked[line] ? 'device' : null, line)); });
    if (!data.console.length) list.appendChild(el('li', null, 'the record holds no console lines'));
    if (data.pmtest_unplaced.length) {
      document.getElementById('pmtest-unplaced-section').hidden = false;
      var unplaced = document.getElementById('pmtest-unplaced');
      data.pmtest_unplaced.forEach(function (line) { unplaced.appendChild(el('li', null, line)); });
    }
  }

  /* ------------------------------------------------------------ drawing */

  function niceStep(span, pixels) {
    var raw = span / Math.max(1, pixels / 90);
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * power >= raw) return steps[i] * power;
    return 10 * power;
  }

  function lanes(spans) {
    /* greedy: each span in the first lane free at its start */
    var ends = [];
    return spans.map(function (p) {
      var end = p.end_ms === null ? data.end_ms : p.end_ms;
      for (var lane = 0; lane < ends.length; lane++) if (ends[lane] <= p.start_ms) break;
      ends[lane] = end;
      return lane;
    });
  }

  function draw() {
    var holder = document.getElementById('timeline');
    clear(holder);
    var px = state.pxPerMs;
    var width = LABEL + Math.ceil(data.end_ms * px) + 40;
    function x(t) { return LABEL + t * px; }
    var others = data.phases.filter(function (p) { return !p.device_phase; });
    var devicePhases = data.phases.filter(function (p) { return p.device_phase; });
    var laneOf = lanes(others);
    var laneCount = laneOf.length ? Math.max.apply(null, laneOf) + 1 : 0;
    var headHeight = LANE + 4 + laneCount * LANE + AXIS;
    var step = niceStep(data.end_ms || 1, width - LABEL);

    /* header: device phases, the other suspend_resume actions, the axis */
    var head = svg('svg', {width: width, height: headHeight, id: 'axis'});
    devicePhases.forEach(function (p) {
      var x0 = x(p.start_ms), w = Math.max(1, x(p.end_ms === null ? data.end_ms : p.end_ms) - x0);
      var group = svg('g', {'class': 'phase'});
      group.appendChild(svg('rect', {x: x0, y: 0, width: w, height: LANE + 2, fill: phaseColour(p.name),
                                     stroke: '#666', 'stroke-width': 0.5}));
      var name = p.name.replace(/^dpm_/, '');
      if (w > name.length * 6.5) group.appendChild(svg('text', {'class': 'phase-label', x: x0 + 3, y: LANE - 2}, name));
      group.appendChild(svg('title', {}, p.name + ': ' + ms(p.start_ms) + ' \u2013 ' + ms(p.end_ms) +
                            (p.end_ms === null ? ' (no end in the trace)' : ', ' + ms(p.end_ms - p.start_ms))));
      head.appendChild(group);
    });
    head.appendChild(svg('text', {'class': 'label', x: 4, y: LANE - 2}, 'device phase'));
    others.forEach(function (p, i) {
      var y = LANE + 4 + laneOf[i] * LANE;
      var x0 = x(p.start_ms), w = Math.max(1, x(p.end_ms === null ? data.end_ms : p.end_ms) - x0);
      var group = svg('g', {'class': 'action'});
      group.appendChild(svg('rect', {x: x0, y: y, width: w, height: LANE - 2, fill: phaseColour(p.name),
                                     stroke: '#666', 'stroke-width': 0.5}));
      if (w > p.name.length * 6.5) {
        group.appendChild(svg('text', {'class': 'phase-label' + (p.name === 'machine_suspend' ? ' on-dark' : ''),
                                       x: x0 + 3, y: y + LANE - 4}, p.name));
      }
      group.appendChild(svg('title', {}, p.name + '[' + p.val + ']: ' + ms(p.start_ms) + ' \u2013 ' + ms(p.end_ms)));
      head.appendChild(group);
    });
    if (laneCount) head.appendChild(svg('text', {'class': 'label', x: 4, y: LANE + 4 + LANE - 4}, 'suspend_resume'));
    var axisY = headHeight - AXIS;
    head.appendChild(svg('line', {'class': 'grid', x1: LABEL, x2: width, y1: axisY, y2: axisY}));
    for (var t = 0; t <= data.end_ms + 1e-9; t += step) {
      head.appendChild(svg('line', {'class': 'grid', x1: x(t), x2: x(t), y1: axisY, y2: axisY + 5}));
      head.appendChild(svg('text', {'class': 'tick', x: x(t) + 2, y: axisY + 15},
                           (step < 1 ? t.toFixed(2) : String(Math.round(t))) + ' ms'));
    }
    head.appendChild(svg('text', {'class': 'label', x: 4, y: axisY + 15}, 'device (driver) \u2014 time since first event'));
    var headHolder = el('div', 'axis-holder');
    headHolder.appendChild(head);
    holder.appendChild(headHolder);

    /* body: bands, grid, one row per device */
    var rows = visibleRows();
    var height = Math.max(ROW, rows.length * ROW);
    var body = svg('svg', {width: width, height: height, id: 'rows'});
    devicePhases.forEach(function (p) {
      var x0 = x(p.start_ms), w = Math.max(1, x(p.end_ms === null ? data.end_ms : p.end_ms) - x0);
      body.appendChild(svg('rect', {'class': 'band', x: x0, y: 0, width: w, height: height,
                                    fill: phaseColour(p.name), 'fill-opacity': 0.28}));
    });
    for (t = 0; t <= data.end_ms + 1e-9; t += step) {
      body.appendChild(svg('line', {'class': 'grid', x1: x(t), x2: x(t), y1: 0, y2: height, 'stroke-opacity': 0.5}));
    }
    var bars = 0, failedBars = 0;
    rows.forEach(function (item, position) {
      var row = item.row, y = position * ROW;
      var group = svg('g', {'class': 'row', 'data-row': item.index});
      if (position % 2) group.appendChild(svg('rect', {'class': 'stripe', x: 0, y: y, width: width, height: ROW}));
      var hit = svg('rect', {'class': 'row-hit', x: 0, y: y, width: width, height: ROW, id: 'row-' + item.index,
                             'data-row': item.index});
      group.appendChild(hit);
      var name = row.name + (row.driver ? ' (' + row.driver + ')' : '');
      var room = Math.floor((LABEL - 8 - row.depth * 10) / 6.6);
      var shown = name.length > room ? name.slice(0, Math.max(1, room - 1)) + '\u2026' : name;
      var label = svg('text', {'class': 'label' + (row.failed ? ' failed' : row.violations.length ? ' violated' : '') +
                                        (item.ancestor ? ' ancestor' : ''),
                               x: 4 + row.depth * 10, y: y + ROW - 4, 'data-row': item.index}, shown);
      label.appendChild(svg('title', {}, rowText(row).join('\n')));
      group.appendChild(label);
      row.calls.forEach(function (call, index) {
        var x0 = x(call.start_ms), w = Math.max(1, (callEnd(call) - call.start_ms) * px);
        var bar = svg('rect', {'class': callClass(call) + (call.pmtest.length ? ' pmtest' : ''), x: x0, y: y + 2,
                               width: w, height: ROW - 4, 'data-row': item.index, 'data-call': index});
        bar.appendChild(svg('title', {}, row.device + ' ' + call.cb + ': ' + duration(call.us) +
                            (call.err ? ' err=' + errText(call) : '')));
        group.appendChild(bar);
        bars++;
        if (call.failed) {
          failedBars++;
          group.appendChild(svg('rect', {'class': 'failed-ring', x: x0 - 4, y: y, width: w + 8, height: ROW,
                                         'data-row': item.index, 'data-call': index}));
        }
        if (call.violations.length) {
          group.appendChild(svg('polygon', {'class': 'violation-mark', 'data-row': item.index, 'data-call': index,
                                            points: [x0 - 5, y, x0 + 5, y, x0, y + 7].join(' ')}));
        }
      });
      body.appendChild(group);
    });
    holder.appendChild(body);
    document.getElementById('shown').textContent =
      rows.length + ' of ' + data.rows.length + ' devices, ' + bars + ' callbacks, ' + px.toFixed(2) + ' px/ms';
    document.body.dataset.rows = String(rows.length);
    document.body.dataset.bars = String(bars);
    document.body.dataset.failedBars = String(failedBars);
  }

  /* ------------------------------------------------------------ tooltip */

  function rowText(row) {
    var lines = [row.device + (row.parent ? '   parent: ' + row.parent : '')];
    row.violations.forEach(function (n) {
      var v = data.violations[n];
      lines.push('violation ' + (n + 1) + ': ' + v.rule + ': ' + v.message);
    });
    row.pmtest.forEach(function (line) { lines.push('pmtest ' + line); });
    row.console.forEach(function (line) { lines.push('console ' + line); });
    return lines;
  }

  function tooltipLines(row, call) {
    var lines = [];
    lines.push(['head', row.device + (row.parent ? '   parent: ' + row.parent : '')]);
    if (call) {
      lines.push([call.failed ? 'fail' : null, call.cb + '  (' + call.phase + ')  ' + duration(call.us) +
                  '  err=' + (call.err === null ? '\u2013' : errText(call)) + (call.failed ? '  FAILED' : '')]);
      lines.push([null, 'start ' + ms(call.start_ms) + '  end ' + ms(call.end_ms)]);
      call.pmtest.forEach(function (line) { lines.push([null, 'pmtest ' + line]); });
      call.violations.forEach(function (n) {
        var v = data.violations[n];
        lines.push(['violation', 'violation ' + (n + 1) + ': ' + v.rule + ': ' + v.message]);
      });
    } else {
      row.calls.forEach(function (c) {
        lines.push([c.failed ? 'fail' : null, c.cb + ' ' + duration(c.us) + (c.err ? ' err=' + errText(c) : '')]);
      });
    }
    row.pmtest.forEach(function (line) { lines.push([null, 'pmtest ' + line]); });
    row.violations.forEach(function (n) {
      if (call && call.violations.indexOf(n) >= 0) return;
      var v = data.violations[n];
      lines.push(['violation', 'violation ' + (n + 1) + ': ' + v.rule + ': ' + v.message]);
    });
    row.console.forEach(function (line) { lines.push([null, 'console ' + line]); });
    return lines;
  }

  function tooltip(event) {
    var tip = document.getElementById('tooltip');
    var target = event.target;
    var rowIndex = target.getAttribute && target.getAttribute('data-row');
    if (rowIndex === null || rowIndex === undefined) { tip.hidden = true; return; }
    var callIndex = target.getAttribute('data-call');
    showTip(Number(rowIndex), callIndex === null ? null : Number(callIndex), event.clientX, event.clientY);
  }

  function showTip(rowIndex, callIndex, clientX, clientY) {
    var tip = document.getElementById('tooltip');
    var row = data.rows[rowIndex];
    var call = callIndex === null ? null : row.calls[callIndex];
    clear(tip);
    tooltipLines(row, call).forEach(function (pair) { tip.appendChild(el('div', pair[0], pair[1])); });
    tip.hidden = false;
    var left = Math.min(clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    var top = clientY + 14;
    if (top + tip.offsetHeight > window.innerHeight) top = Math.max(0, clientY - tip.offsetHeight - 10);
    tip.style.left = Math.max(0, left) + 'px';
    tip.style.top = top + 'px';
  }

  /* #call=ROW.CALL: scroll to that callback and show its tooltip (a link to one call) */
  function pinnedCall() {
    var wanted = /call=(\d+)\.(\d+)/.exec(window.location.hash);
    if (!wanted) return;
    var rowIndex = Number(wanted[1]), callIndex = Number(wanted[2]);
    if (!data.rows[rowIndex] || !data.rows[rowIndex].calls[callIndex]) {
      pageError('#call=' + rowIndex + '.' + callIndex + ': no such callback');
      return;
    }
    var bar = document.querySelector('rect.bar[data-row="' + rowIndex + '"][data-call="' + callIndex + '"]');
    if (!bar) return;  /* filtered out */
    var holder = document.getElementById('timeline');
    holder.scrollTop = Math.max(0, Number(bar.getAttribute('y')) - 60);
    var box = bar.getBoundingClientRect();
    showTip(rowIndex, callIndex, box.right, box.bottom);
  }

  /* ------------------------------------------------------------ main */

  function fit() {
    var width = document.getElementById('timeline').clientWidth || 1200;
    state.pxPerMs = Math.max(0.05, (width - LABEL - 50) / Math.max(0.001, data.end_ms));
  }

  function main() {
    try {
      data = JSON.parse(document.getElementById('timeline-data').textContent);
    } catch (error) {
      pageError('cannot read the embedded timeline data: ' + error);
      document.body.dataset.drawn = 'failed';
      return;
    }
    if (data.schema !== 'pmlab-timeline/1') pageError('unexpected timeline schema ' + data.schema);
    var wanted = /min-us=(\d+)/.exec(window.location.hash);
    if (wanted) { state.minUs = Number(wanted[1]); document.getElementById('min-us').value = wanted[1]; }
    var steps = data.no_trace ? [summary, findings, hostSide, consoleLines]
      : [summary, findings, hostSide, legend, consoleLines, fit, draw, pinnedCall];
    if (data.no_trace) { document.body.dataset.rows = '0'; document.body.dataset.bars = '0'; }
    steps.forEach(function (step) {
      try { step(); } catch (error) { pageError(step.name + ': ' + (error && error.stack || error)); }
    });
    document.getElementById('zoom-in').addEventListener('click', function () { state.pxPerMs *= 2; draw(); });
    document.getElementById('zoom-out').addEventListener('click', function () { state.pxPerMs /= 2; draw(); });
    document.getElementById('zoom-fit').addEventListener('click', function () { fit(); draw(); });
    document.getElementById('min-us').addEventListener('change', function (event) {
      state.minUs = Number(event.target.value) || 0; draw();
    });
    document.getElementById('device-filter').addEventListener('input', function (event) {
      state.filter = event.target.value; draw();
    });
    var holder = document.getElementById('timeline');
    holder.addEventListener('mousemove', tooltip);
    holder.addEventListener('mouseleave', function () { document.getElementById('tooltip').hidden = true; });
    if (document.body.dataset.drawn === 'pending') document.body.dataset.drawn = errors.length ? 'failed' : 'ready';
  }

  document.addEventListener('DOMContentLoaded', main);
})();
