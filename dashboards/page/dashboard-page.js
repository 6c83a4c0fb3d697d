/* pmlab dashboard page: draws dashboard.json (embedded by dashboards/render.py
 * as <script type="application/json" id="dashboard-data">) with Chart.js.
 *
 * Every string from the results (device names, reasons, console lines, run
 * ids) reaches the DOM through textContent / DOM APIs only, never innerHTML.
 * When every chart has drawn once, <body data-charts="ready"
 * data-chart-count="N"> and the title ends with "(N charts)"; errors caught
 * on the page are counted in <body data-errors> and logged to the console.
 */
(function () {
  'use strict';

  var pageErrors = [];
  function pageError(message) {
    pageErrors.push(String(message));
    if (document.body) document.body.dataset.errors = String(pageErrors.length);
    console.error('pmlab dashboard: ' + message);
  }
  window.addEventListener('error', function (event) { pageError(event.message || 'error'); });

  var MODE_COLOURS = ['#3367d6', '#e8710a', '#188038', '#a142f4', '#d93025', '#12b5cb', '#f9ab00', '#5f6368'];
  var KIND_COLOURS = {
    'fail': '#d93025', 'fake-sleep': '#f9ab00', 'hang': '#a142f4', 'unfinished': '#7b1fa2', 'error': '#5f6368',
    'kernel-warning': '#e8710a', 'ordering-violation': '#12b5cb', 'device-not-working': '#b06000',
    'other': '#9aa0a6'
  };
  var KERNEL_COLOURS = ['#24324a', '#12b5cb', '#f9ab00', '#d93025', '#81c995', '#a142f4', '#5f6368'];
  var STEP_COLOURS = ['#3367d6', '#8ab4f8', '#e8710a', '#fbbc04', '#188038', '#81c995', '#a142f4', '#d7aefb',
                      '#d93025', '#f28b82', '#12b5cb', '#78d9ec', '#5f6368', '#bdc1c6'];

  /* DOM helpers: text only. */
  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function fmt(value, digits) {
    if (value === null || value === undefined) return '\u2013';
    if (typeof value === 'number') return digits === undefined ? String(value) : value.toFixed(digits);
    return String(value);
  }
  function pct(value) { return value === null || value === undefined ? '\u2013' : (value * 100).toFixed(1) + ' %'; }
  function where(occ) {
    if (!occ) return '\u2013';
    return occ.run_id + ' #' + occ.cycle + (occ.host_start ? ' (' + occ.host_start + ')' : '');
  }
  /* Timeline pages (dashboards/timeline.py), {"<run id>/<cycle>": relative href}, embedded by render.py */
  var timelineLinks = {};
  function timelineLink(occ, text, withoutPage) {
    var href = occ && timelineLinks[occ.run_id + '/' + occ.cycle];
    if (!href) return withoutPage === undefined ? text : withoutPage;
    var link = el('a', 'timeline-link', text);
    link.href = href;
    link.title = 'timeline of run ' + occ.run_id + ' cycle ' + occ.cycle;
    return link;
  }
  /* columns: [header, function(row) -> value, class] ; class 'num' or 'text' */
  function table(node, columns, rows, emptyText) {
    clear(node);
    var head = el('tr');
    columns.forEach(function (c) { head.appendChild(el('th', null, c[0])); });
    var thead = el('thead'); thead.appendChild(head); node.appendChild(thead);
    var body = el('tbody');
    if (!rows.length) {
      var tr = el('tr'); var td = el('td', 'empty', emptyText || 'none');
      td.colSpan = columns.length; tr.appendChild(td); body.appendChild(tr);
    }
    rows.forEach(function (row) {
      var tr = el('tr');
      columns.forEach(function (c) {
        var value = c[1](row);
        var td = el('td', c[2] || null);
        if (value instanceof Node) td.appendChild(value); else td.textContent = fmt(value);
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    node.appendChild(body);
  }
  function statusCell(status) { return el('span', 'status-' + status, status); }

  /* Charts: count them, and mark the page ready once each has rendered. */
  var expected = 0, rendered = 0, charts = {};
  var readyPlugin = {
    id: 'pmlabReady',
    afterRender: function (chart) {
      if (chart.$pmlabRendered) return;
      chart.$pmlabRendered = true;
      rendered += 1;
      maybeReady();
    }
  };
  var created = false;
  function maybeReady() {
    if (!created || rendered < expected) return;
    document.body.dataset.charts = 'ready';
    document.body.dataset.chartCount = String(rendered);
    document.title = 'pmlab dashboard (' + rendered + ' charts)';
  }
  /* Wilson interval whiskers over the success bars: chart.$pmlabIntervals
   * holds one list of intervals per dataset. */
  var errorBarsPlugin = {
    id: 'pmlabErrorBars',
    afterDatasetsDraw: function (chart) {
      var sets = chart.$pmlabIntervals;
      if (!sets) return;
      var y = chart.scales.y, ctx = chart.ctx;
      ctx.save();
      ctx.strokeStyle = '#1d1d1f';
      ctx.lineWidth = 1.5;
      sets.forEach(function (intervals, d) {
        chart.getDatasetMeta(d).data.forEach(function (bar, i) {
          var interval = intervals[i];
          if (!interval) return;
          var lo = y.getPixelForValue(interval[0] * 100), hi = y.getPixelForValue(interval[1] * 100);
          var half = Math.min(7, (bar.width || 14) / 2);
          ctx.beginPath();
          ctx.moveTo(bar.x, lo); ctx.lineTo(bar.x, hi);
          ctx.moveTo(bar.x - half, lo); ctx.lineTo(bar.x + half, lo);
          ctx.moveTo(bar.x - half, hi); ctx.lineTo(bar.x + half, hi);
          ctx.stroke();
        });
      });
      ctx.restore();
    }
  };
  function chart(id, config, extra) {
    var canvas = document.getElementById(id);
    config.options = config.options || {};
    config.options.animation = false;
    config.options.responsive = true;
    config.options.maintainAspectRatio = false;
    config.plugins = [readyPlugin].concat(extra || []);
    expected += 1;
    charts[id] = new Chart(canvas, config);
    return charts[id];
  }
  function noData(id, text) {
    var canvas = document.getElementById(id);
    var box = canvas.parentNode;
    box.classList.remove('tall');
    box.style.height = 'auto';
    canvas.hidden = true;
    box.appendChild(el('p', 'empty', text));
  }

  /* ---------------------------------------------------------------- sections */

  function overview(data) {
    var i = data.inputs;
    document.getElementById('overview').textContent =
      i.cycles + ' cycles from ' + i.runs + ' runs, ' + (i.first_start || '?') + ' \u2013 ' + (i.last_start || '?') +
      '; modes: ' + (i.modes.join(', ') || 'none') +
      (i.excluded_cycles ? '; ' + i.excluded_cycles + ' cycles excluded (unreadable last line)' : '') +
      (data.input_errors.length ? '; ' + data.input_errors.length + ' input errors' : '');
    if (data.input_errors.length) {
      var list = document.getElementById('input-errors');
      data.input_errors.forEach(function (e) {
        list.appendChild(el('li', null, e.file + (e.line ? ':' + e.line : '') + ': ' + e.message));
      });
      document.getElementById('input-errors-section').hidden = false;
    }
  }

  /* The page's first word: per mode, does the newest build pass (the
   * trend's current status), since when does it fail, and how many cycles
   * did not pass. */
  function headline(data) {
    var modes = Object.keys(data.success.modes).sort();
    var trend = data.trends.modes;
    var failing = modes.filter(function (m) { return trend[m] && trend[m].current === 'fail'; });
    var passing = modes.filter(function (m) { return trend[m] && trend[m].current === 'pass'; });
    var node = document.getElementById('headline');
    var status = !modes.length ? 'unknown' : failing.length ? 'fail' : passing.length ? 'pass' : 'unknown';
    node.className = 'headline status-' + status;
    var all = data.success.all, notPassed = data.failures.total;
    node.textContent = !modes.length ? 'No cycles recorded' : failing.length ?
      'FAIL: ' + failing.join(', ') + (failing.length === 1 ? ' fails' : ' fail') + ' on the newest build' :
      passing.length ? 'PASS: every mode passes on the newest build' : 'No judged cycles (only lab errors or injected)';
    var lab = data.lab_errors;
    document.getElementById('headline-note').textContent =
      all.cycles + ' cycles: ' + all.counts.pass + ' passed, ' + all.counts.fail + ' failed, ' + all.counts.hang +
      ' hung, ' + all.counts.unfinished + ' unfinished, ' + all.counts.error + ' lab errors' +
      (all.injected ? ', ' + all.injected + ' injected' : '') + '; ' + notPassed + ' did not pass (listed below).' +
      (lab && lab.over_budget ? ' Lab errors OVER BUDGET (' + pct(lab.share) + '): the lab, not the kernel, first.' : '');
    table(document.getElementById('table-headline'), [
      ['mode', function (m) { return m; }],
      ['newest build', function (m) { return statusCell(trend[m] ? trend[m].current : 'unknown'); }],
      ['passed / judged', function (m) {
        var b = data.success.modes[m]; return b.counts.pass + ' / ' + b.judged;
      }, 'num'],
      ['success rate', function (m) { return pct(data.success.modes[m].rate); }, 'num'],
      ['did not pass', function (m) {
        var c = data.success.modes[m].counts;
        return ['fail', 'hang', 'unfinished', 'error'].filter(function (k) { return c[k]; })
          .map(function (k) { return c[k] + ' ' + (k === 'error' ? 'lab error' : k); }).join(', ') || '\u2013';
      }],
      ['failing since', function (m) {
        var o = trend[m] && trend[m].failing_since;
        if (!o) return '\u2013';
        var text = where(o) + ', build ' + o.build;
        return timelineLink(o, text);
      }, 'text']
    ], modes, 'No cycles.');
  }

  function success(data) {
    var modes = Object.keys(data.success.modes).sort();
    document.getElementById('success-definition').textContent = 'Rate = ' + data.success.definition + '.';
    var rows = modes.map(function (m) { var b = data.success.modes[m]; return {mode: m, b: b}; });
    rows.push({mode: 'all', b: data.success.all});
    table(document.getElementById('table-success'), [
      ['mode', function (r) { return r.mode; }],
      ['cycles', function (r) { return r.b.cycles; }, 'num'],
      ['pass', function (r) { return r.b.counts.pass; }, 'num'],
      ['fail', function (r) { return r.b.counts.fail; }, 'num'],
      ['hang', function (r) { return r.b.counts.hang; }, 'num'],
      ['unfinished', function (r) { return r.b.counts.unfinished; }, 'num'],
      ['lab error', function (r) { return r.b.counts.error; }, 'num'],
      ['interrupted', function (r) { return r.b.counts.interrupted || 0; }, 'num'],
      ['injected', function (r) { return r.b.injected; }, 'num'],
      ['success rate', function (r) { return pct(r.b.rate); }, 'num'],
      ['95 % interval', function (r) { return r.b.ci95 ? pct(r.b.ci95[0]) + ' \u2013 ' + pct(r.b.ci95[1]) : '\u2013'; }, 'num']
    ], rows);
    var judged = modes.filter(function (m) { return data.success.modes[m].judged > 0; });
    if (!judged.length) { noData('chart-success', 'No judged cycles.'); return; }
    var c = chart('chart-success', {
      type: 'bar',
      data: {
        labels: judged,
        datasets: [{
          label: 'success rate (%)',
          data: judged.map(function (m) { return data.success.modes[m].rate * 100; }),
          backgroundColor: judged.map(function (m, i) { return MODE_COLOURS[i % MODE_COLOURS.length]; })
        }]
      },
      options: {
        scales: {y: {min: 0, max: 100, title: {display: true, text: '% of judged cycles (bars: Wilson 95 %)'}}},
        plugins: {legend: {display: false}}
      }
    }, [errorBarsPlugin]);
    c.$pmlabIntervals = [judged.map(function (m) { return data.success.modes[m].ci95; })];
    c.draw();
  }

  /* A long label as lines of at most `width` characters, broken after a
   * ':' or a space where it can be (Chart.js draws an array as lines), so
   * that no axis cuts it. */
  function wrap(text, width) {
    var lines = [], rest = String(text);
    while (rest.length > width) {
      var cut = Math.max(rest.lastIndexOf(':', width), rest.lastIndexOf(' ', width));
      if (cut < width / 3) cut = width - 1;
      lines.push(rest.slice(0, cut + 1).trim());
      rest = rest.slice(cut + 1);
    }
    lines.push(rest.trim());
    return lines;
  }

  function bucketSection(data) {
    var list = data.buckets;
    table(document.getElementById('table-buckets'), [
      ['bucket', function (b) { return b.bucket; }, 'text'],
      ['kind', function (b) { return b.kind; }],
      ['count', function (b) { return b.count; }, 'num'],
      ['as injected', function (b) { return b.expected; }, 'num'],
      ['modes', function (b) {
        return Object.keys(b.modes).sort().map(function (m) { return m + ' ' + b.modes[m]; }).join(', ');
      }],
      ['first', function (b) { return timelineLink(b.first, where(b.first)); }],
      ['last', function (b) { return timelineLink(b.last, where(b.last)); }],
      ['reason (first)', function (b) { return b.reason; }, 'text'],
      ['evidence (first)', function (b) { return b.evidence; }, 'text']
    ], list, 'No failures.');
    if (!list.length) {
      noData('chart-buckets', data.inputs.cycles ? 'No failure buckets: every cycle passed.' : 'No cycles recorded.');
      return;
    }
    var top = list.slice(0, 20);
    var labels = top.map(function (b) { return wrap(b.bucket, 34); });
    var lines = labels.reduce(function (sum, l) { return sum + l.length; }, 0);
    document.getElementById('chart-buckets').parentNode.style.height = Math.max(260, 40 + lines * 15) + 'px';
    chart('chart-buckets', {
      type: 'bar',
      data: {
        labels: labels,
        datasets: [{
          label: 'cycles',
          data: top.map(function (b) { return b.count; }),
          backgroundColor: top.map(function (b) { return KIND_COLOURS[b.kind] || KIND_COLOURS.other; })
        }]
      },
      options: {indexAxis: 'y', plugins: {legend: {display: false}},
                scales: {x: {beginAtZero: true, ticks: {precision: 0}, title: {display: true, text: 'cycles'}},
                         y: {ticks: {autoSkip: false}}}}
    });
  }

  function trend(data) {
    var builds = data.trends.builds, modes = Object.keys(data.trends.modes).sort();
    table(document.getElementById('table-trend'), [
      ['mode', function (m) { return m; }],
      ['builds', function (m) { return data.trends.modes[m].builds; }, 'num'],
      ['current', function (m) { return statusCell(data.trends.modes[m].current); }],
      ['failing since', function (m) { var o = data.trends.modes[m].failing_since; return o ? o.build + ': ' + where(o) : '\u2013'; }],
      ['first fail', function (m) { var o = data.trends.modes[m].first_fail; return o ? o.build + ': ' + where(o) : '\u2013'; }],
      ['last pass', function (m) { var o = data.trends.modes[m].last_pass; return o ? o.build + ': ' + where(o) : '\u2013'; }]
    ], modes, 'No cycles.');
    if (!builds.length) { noData('chart-trend', 'No builds.'); return; }
    chart('chart-trend', {
      type: 'line',
      data: {
        labels: builds.map(function (b) { return b.key; }),
        datasets: modes.map(function (m, i) {
          return {
            label: m,
            data: builds.map(function (b) { var x = b.modes[m]; return x && x.rate !== null ? x.rate * 100 : null; }),
            borderColor: MODE_COLOURS[i % MODE_COLOURS.length],
            backgroundColor: MODE_COLOURS[i % MODE_COLOURS.length],
            spanGaps: true, pointRadius: 4
          };
        })
      },
      options: {scales: {y: {min: 0, max: 100, title: {display: true, text: 'success rate (%)'}},
                         x: {title: {display: true, text: 'build: commit / series hash (oldest first)'}}}}
    });
  }

  /* The kernels side by side: a table with one column per kernel (K1, K2,
   * ... in order of their first cycle) and, for two or more, grouped bars. */
  function kernelLabel(k, i) {
    return 'K' + (i + 1) + ': ' + k.kernel_spec + (k.variant ? ' ' + k.variant : '');
  }
  function rateText(b) {
    if (!b || b.rate === null) return '\u2013';
    return pct(b.rate) + ' (' + pct(b.ci95[0]) + ' \u2013 ' + pct(b.ci95[1]) + '), ' +
      b.counts.pass + '/' + b.judged;
  }
  function timeText(d) { return d ? fmt(d.p50, 1) + ' / ' + fmt(d.p95, 1) + ' (n ' + d.n + ')' : '\u2013'; }
  /* The PM phases of a mode over all kernels, in the order the kernels list them. */
  function phaseNames(list, mode) {
    var names = [];
    list.forEach(function (k) {
      ((k.modes[mode] || {}).phases || []).forEach(function (p) { if (names.indexOf(p.phase) < 0) names.push(p.phase); });
    });
    return names;
  }
  function phaseOf(k, mode, name) {
    return ((k.modes[mode] || {}).phases || []).filter(function (p) { return p.phase === name; })[0] || null;
  }
  function kernelsSection(data) {
    var section = data.kernels;  /* dashboards written before it lack it */
    if (!section || !section.kernels.length) return;
    var list = section.kernels;
    document.getElementById('kernels-section').hidden = false;
    document.getElementById('kernels-note').textContent =
      list.length + (list.length === 1 ? ' kernel' : ' kernels') + ' (spec[@commit] / series hash / config hash / ' +
      'variant). Rate = ' + section.definition + '. Times: median / p95 of passing cycles. ' +
      'Slowest: device callbacks by p95 in that kernel\'s cycles.';
    var modes = [];
    list.forEach(function (k) { Object.keys(k.modes).forEach(function (m) { if (modes.indexOf(m) < 0) modes.push(m); }); });
    modes.sort();
    var rows = [
      {label: 'key', value: function (k) { return k.key; }, cls: 'text'},
      {label: 'kernel spec', value: function (k) { return k.kernel_spec + (k.spec_recorded ? '' : ' (not recorded: assumed)'); }},
      {label: 'source commit', value: function (k) { return k.source_commit; }, cls: 'text', optional: true},
      {label: 'series hash', value: function (k) { return k.series_hash; }, cls: 'text'},
      {label: 'config hash', value: function (k) { return k.config_hash; }, cls: 'text', optional: true},
      {label: 'variant', value: function (k) { return k.variant; }},
      {label: 'releases', value: function (k) { return k.releases.join(' '); }, cls: 'text'},
      {label: 'runs', value: function (k) { return k.runs.join(' '); }, cls: 'text'},
      {label: 'cycles', value: function (k) { return k.all.cycles; }, cls: 'num'},
      {label: 'success rate, all modes', value: function (k) { return rateText(k.all); }, cls: 'num'}
    ];
    modes.forEach(function (m) {
      rows.push({group: m});
      rows.push({label: m + ': success rate (95 %)', value: function (k) { return rateText(k.modes[m]); }, cls: 'num'});
      rows.push({label: m + ': suspend ms p50 / p95', value: function (k) { return timeText(k.modes[m] && k.modes[m].suspend_ms); }, cls: 'num', optional: true});
      rows.push({label: m + ': resume ms p50 / p95', value: function (k) { return timeText(k.modes[m] && k.modes[m].resume_ms); }, cls: 'num', optional: true});
      phaseNames(list, m).filter(function (p) { return p.indexOf('dpm_') === 0; }).forEach(function (p) {
        rows.push({label: m + ': ' + p + ' ms p50 / p95', cls: 'num', optional: true,
                   value: function (k) { return timeText(phaseOf(k, m, p)); }});
      });
    });
    rows.push({group: 'slowest device callbacks (p95 us, median us)'});
    var depth = Math.max.apply(null, list.map(function (k) { return k.slowest.length; }));
    for (var i = 0; i < depth; i++) {
      rows.push({label: '#' + (i + 1), cls: 'text', value: (function (index) {
        return function (k) {
          var r = k.slowest[index];
          return r ? r.device + ' \u00b7 ' + r.phase + ': ' + fmt(r.p95, 1) + ' (' + fmt(r.median, 1) + ')' : '\u2013';
        };
      })(i)});
    }
    if (!depth) rows.push({label: 'slowest', value: function () { return 'no callback timings'; }});
    var node = document.getElementById('table-kernels');
    clear(node);
    var head = el('tr');
    head.appendChild(el('th', 'row-head', ''));
    list.forEach(function (k, i) { head.appendChild(el('th', null, kernelLabel(k, i))); });
    var thead = el('thead'); thead.appendChild(head); node.appendChild(thead);
    var body = el('tbody');
    rows.forEach(function (row) {
      /* a row no kernel has a value for (no source commit, untimed pm_test modes) says nothing */
      if (row.optional && list.every(function (k) { return fmt(row.value(k)) === '\u2013'; })) return;
      var tr = el('tr');
      if (row.group !== undefined) {
        var td = el('td', 'group', row.group);
        td.colSpan = list.length + 1;
        tr.appendChild(td);
      } else {
        tr.appendChild(el('th', 'row-head', row.label));
        list.forEach(function (k) { tr.appendChild(el('td', row.cls || null, fmt(row.value(k)))); });
      }
      body.appendChild(tr);
    });
    node.appendChild(body);
    if (list.length < 2) return;  /* one kernel: nothing to compare, the table says what it is */
    document.getElementById('kernels-charts').hidden = false;
    var colour = function (i) { return KERNEL_COLOURS[i % KERNEL_COLOURS.length]; };
    var c = chart('chart-kernels-rate', {
      type: 'bar',
      data: {
        labels: modes,
        datasets: list.map(function (k, i) {
          return {label: kernelLabel(k, i), backgroundColor: colour(i),
                  data: modes.map(function (m) { var b = k.modes[m]; return b && b.rate !== null ? b.rate * 100 : null; })};
        })
      },
      options: {scales: {y: {min: 0, max: 100, title: {display: true, text: '% of judged cycles (bars: Wilson 95 %)'}}}}
    }, [errorBarsPlugin]);
    c.$pmlabIntervals = list.map(function (k) { return modes.map(function (m) { return k.modes[m] ? k.modes[m].ci95 : null; }); });
    c.draw();
    var labels = [], keys = [];
    modes.forEach(function (m) {
      ['suspend_ms', 'resume_ms'].forEach(function (f) {
        if (list.some(function (k) { return k.modes[m] && k.modes[m][f]; })) {
          labels.push(m + ' ' + f.replace('_ms', '')); keys.push([m, f]);
        }
      });
    });
    var timedModes = modes.filter(function (m) { return phaseNames(list, m).length; });
    var select = document.getElementById('kernels-phase-mode');
    timedModes.forEach(function (m) { var o = el('option', null, m); o.value = m; select.appendChild(o); });
    if (!timedModes.length) {
      select.disabled = true;
      noData('chart-kernels-phases', 'No record has phase_ms (records written before the lab measured PM phases).');
    } else {
      var phaseData = function (mode) {
        var names = phaseNames(list, mode);
        return {labels: names, datasets: list.map(function (k, i) {
          return {label: kernelLabel(k, i), backgroundColor: colour(i), data: names.map(function (p) {
            var item = phaseOf(k, mode, p); return item ? item.p50 : null;
          })};
        })};
      };
      var first = timedModes.indexOf('mem') >= 0 ? 'mem' : timedModes[0];
      select.value = first;
      var pc = chart('chart-kernels-phases', {
        type: 'bar', data: phaseData(first),
        options: {scales: {y: {beginAtZero: true, title: {display: true, text: 'median ms (passing cycles)'}},
                           x: {ticks: {autoSkip: false}}}}
      });
      select.addEventListener('change', function () { pc.data = phaseData(select.value); pc.update(); });
    }
    if (!keys.length) { noData('chart-kernels-time', 'No timed passing cycles.'); return; }
    chart('chart-kernels-time', {
      type: 'bar',
      data: {
        labels: labels,
        datasets: list.map(function (k, i) {
          return {label: kernelLabel(k, i), backgroundColor: colour(i), data: keys.map(function (key) {
            var b = k.modes[key[0]]; return b && b[key[1]] ? b[key[1]].p50 : null;
          })};
        })
      },
      options: {scales: {y: {beginAtZero: true, title: {display: true, text: 'median ms (passing cycles)'}}}}
    });
  }

  function timing(data) {
    var modes = Object.keys(data.timing.modes).sort();
    table(document.getElementById('table-timing'), [
      ['mode', function (r) { return r.mode; }],
      ['measure', function (r) { return r.field; }],
      ['n', function (r) { return r.s.n; }, 'num'],
      ['min', function (r) { return fmt(r.s.min, 1); }, 'num'],
      ['p50', function (r) { return fmt(r.s.p50, 1); }, 'num'],
      ['p90', function (r) { return fmt(r.s.p90, 1); }, 'num'],
      ['p95', function (r) { return fmt(r.s.p95, 1); }, 'num'],
      ['p99', function (r) { return fmt(r.s.p99, 1); }, 'num'],
      ['max', function (r) { return fmt(r.s.max, 1); }, 'num'],
      ['mean', function (r) { return fmt(r.s.mean, 1); }, 'num']
    ], [].concat.apply([], modes.map(function (m) {
      return ['suspend_ms', 'resume_ms'].filter(function (f) { return data.timing.modes[m][f]; })
        .map(function (f) { return {mode: m, field: f + ' (ms)', s: data.timing.modes[m][f].stats}; });
    })), 'No timed passing cycles.');
    var select = document.getElementById('timing-mode');
    modes.forEach(function (m) { var o = el('option', null, m); o.value = m; select.appendChild(o); });
    if (!modes.length) { select.disabled = true; noData('chart-timing', 'No timed passing cycles.'); return; }
    function series(mode) {
      var block = data.timing.modes[mode];
      var bins = (block.suspend_ms || block.resume_ms).histogram;
      return {
        labels: bins.map(function (b) { return b.hi === null ? '\u2265 ' + b.lo : b.lo + '\u2013' + b.hi; }),
        datasets: ['suspend_ms', 'resume_ms'].filter(function (f) { return block[f]; }).map(function (f) {
          return {label: f.replace('_ms', '') + ' (' + block[f].stats.n + ' cycles)',
                  data: block[f].histogram.map(function (b) { return b.count; }),
                  backgroundColor: f === 'suspend_ms' ? '#3367d6' : '#e8710a'};
        })
      };
    }
    var c = chart('chart-timing', {
      type: 'bar', data: series(modes[0]),
      options: {scales: {y: {beginAtZero: true, ticks: {precision: 0}, title: {display: true, text: 'cycles'}},
                         x: {title: {display: true, text: 'guest time (ms), trace-measured'}}}}
    });
    select.addEventListener('change', function () { c.data = series(select.value); c.update(); });
  }

  /* One order for the steps of all modes: a step new to the merged list goes
   * in before the next of its mode's steps already there (else at the end),
   * so steps the modes share (start-sent, ..., ended-judged) line up. */
  function mergeSteps(lists) {
    var merged = [];
    lists.forEach(function (steps) {
      steps.forEach(function (step, i) {
        if (merged.indexOf(step) >= 0) return;
        var next = -1;
        for (var j = i + 1; j < steps.length && next < 0; j++) next = merged.indexOf(steps[j]);
        if (next < 0) merged.push(step); else merged.splice(next, 0, step);
      });
    });
    return merged;
  }

  function hostTime(data) {
    var section = data.host_time || {modes: {}};  /* dashboards written before it lack it */
    var modes = Object.keys(section.modes).sort();
    function stat(mode, step) {
      return section.modes[mode].steps.filter(function (s) { return s.step === step; })[0] || null;
    }
    var rows = [];
    modes.forEach(function (m) {
      var b = section.modes[m];
      b.steps.forEach(function (s) { rows.push({mode: m, step: s.step, s: s, total: b.mean_total}); });
      rows.push({mode: m, step: 'whole cycle', s: {n: b.cycles, mean: b.mean_total, median: b.median_total},
                 total: b.mean_total});
    });
    table(document.getElementById('table-host-time'), [
      ['mode', function (r) { return r.mode; }],
      ['step (from\u2013to)', function (r) { return r.step; }, 'text'],
      ['cycles', function (r) { return r.s.n; }, 'num'],
      ['mean (s)', function (r) { return fmt(r.s.mean, 3); }, 'num'],
      ['median (s)', function (r) { return fmt(r.s.median, 3); }, 'num'],
      ['of the mean total', function (r) { return r.total > 0 ? pct(r.s.mean / r.total) : '\u2013'; }, 'num']
    ], rows, 'No passing cycle has host_phases (records written before the lab timed its steps).');
    document.getElementById('host-time-note').textContent =
      'Mean seconds per step of the host timeline (start = host_start, to the verdict), passing cycles; ' +
      'a step missing from some cycles is averaged over those that have it.';
    if (!modes.length) { noData('chart-host-time', 'No passing cycle has host_phases.'); return; }
    if (modes.length > 4) document.getElementById('chart-host-time').parentNode.classList.add('tall');
    var steps = mergeSteps(modes.map(function (m) {
      return section.modes[m].steps.map(function (s) { return s.step; });
    }));
    chart('chart-host-time', {
      type: 'bar',
      data: {
        labels: modes.map(function (m) {
          var b = section.modes[m];
          return m + ' (' + b.cycles + ' cycles, ' + fmt(b.mean_total, 2) + ' s)';
        }),
        datasets: steps.map(function (step, i) {
          return {label: step, backgroundColor: STEP_COLOURS[i % STEP_COLOURS.length],
                  data: modes.map(function (m) { var s = stat(m, step); return s ? s.mean : null; })};
        })
      },
      options: {
        indexAxis: 'y',
        scales: {x: {stacked: true, beginAtZero: true,
                     title: {display: true, text: 'seconds (mean per passing cycle)'}},
                 y: {stacked: true, ticks: {autoSkip: false}}},
        plugins: {
          legend: {position: 'bottom', labels: {boxWidth: 12}},
          tooltip: {callbacks: {label: function (context) {
            var s = stat(modes[context.dataIndex], context.dataset.label);
            return s ? context.dataset.label + ': mean ' + fmt(s.mean, 3) + ' s, median ' + fmt(s.median, 3) +
              ' s (' + s.n + ' cycles)' : '';
          }}}
        }
      }
    });
  }

  function latency(data) {
    var top = data.latency.top_p95;
    table(document.getElementById('table-latency'), [
      ['device', function (r) { return r.device; }, 'text'],
      ['driver', function (r) { return r.driver; }, 'text'],
      ['phase', function (r) { return r.phase; }],
      ['n', function (r) { return r.n; }, 'num'],
      ['median (us)', function (r) { return fmt(r.median, 1); }, 'num'],
      ['p95 (us)', function (r) { return fmt(r.p95, 1); }, 'num'],
      ['max (us)', function (r) { return fmt(r.max, 1); }, 'num'],
      ['errors', function (r) { return r.errors; }, 'num'],
      ['never returned', function (r) { return r.unfinished; }, 'num'],
      ['slowest cycle', function (r) {
        return r.max_at ? timelineLink(r.max_at, r.max_at.run_id + ' #' + r.max_at.cycle) : '\u2013';
      }]
    ], top, 'No callback timings in these records.');
    if (!top.length) { noData('chart-latency', 'No callback timings in these records.'); return; }
    chart('chart-latency', {
      type: 'bar',
      data: {
        labels: top.map(function (r) { return r.device + ' \u00b7 ' + r.phase; }),
        datasets: [
          {label: 'median (us)', data: top.map(function (r) { return r.median; }), backgroundColor: '#8ab4f8'},
          {label: 'p95 (us)', data: top.map(function (r) { return r.p95; }), backgroundColor: '#3367d6'}
        ]
      },
      options: {indexAxis: 'y', scales: {x: {beginAtZero: true, title: {display: true, text: 'microseconds'}},
                                         y: {ticks: {autoSkip: false}}}}
    });
  }

  function labErrors(data) {
    var e = data.lab_errors;
    if (!e) return;  /* dashboards written before it lack it */
    var note = document.getElementById('lab-errors-note');
    note.textContent = e.errors + ' of ' + e.cycles + ' cycles (' + pct(e.share) + ') were the lab\'s errors; budget ' +
      pct(e.budget) + (e.over_budget ? ': OVER BUDGET, fix the lab first' : ': within budget') +
      '; ' + e.reruns + ' rerun(s). ' + e.definition + '.';
    if (e.over_budget) note.classList.add('over-budget');
    table(document.getElementById('table-lab-errors'), [
      ['cause', function (r) { return r.cause; }, 'text'],
      ['cycles', function (r) { return r.count; }, 'num'],
      ['modes', function (r) {
        return Object.keys(r.modes).sort().map(function (m) { return m + ' ' + r.modes[m]; }).join(', ');
      }, 'text'],
      ['first', function (r) { return where(r.first); }, 'text'],
      ['last', function (r) { return where(r.last); }, 'text'],
      ['example', function (r) { return r.reason; }, 'text']
    ], e.causes, 'No lab errors.');
  }

  function worksAfterResume(data) {
    var w = data.works_after_resume;
    if (!w) return;  /* dashboards written before it lack it */
    document.getElementById('works-note').textContent = w.cycles ?
      w.cycles + ' cycles of a device guest (--devices zoo) probed their devices after the resume. ' + w.definition + '.' :
      'No cycle ran on a device guest (--devices zoo).';
    table(document.getElementById('table-works'), [
      ['device', function (r) { return r.device; }, 'text'],
      ['probe', function (r) { return r.probe; }],
      ['works / probed', function (r) { return r.ok + ' / ' + r.probes; }, 'num'],
      ['rate', function (r) { return pct(r.rate); }, 'num'],
      ['95 % interval', function (r) { return r.ci95 ? pct(r.ci95[0]) + ' – ' + pct(r.ci95[1]) : '–'; }],
      ['per mode', function (r) {
        return Object.keys(r.modes).map(function (m) { return m + ' ' + r.modes[m].ok + '/' + r.modes[m].probes; }).join(', ');
      }, 'text'],
      ['probe ms (median)', function (r) { return r.probe_ms ? fmt(r.probe_ms.p50) : '–'; }, 'num'],
      ['last failure', function (r) {
        return r.last_failure ? where(r.last_failure) + ': ' + r.last_failure.error : '–';
      }, 'text']
    ], w.devices, 'No device probes in these records.');
    table(document.getElementById('table-works-callbacks'), [
      ['device', function (r) { return r.device; }, 'text'],
      ['driver', function (r) { return r.driver; }],
      ['phase', function (r) { return r.phase; }],
      ['calls', function (r) { return r.n; }, 'num'],
      ['median (us)', function (r) { return fmt(r.median, 1); }, 'num'],
      ['p95 (us)', function (r) { return fmt(r.p95, 1); }, 'num'],
      ['max (us)', function (r) { return fmt(r.max, 1); }, 'num']
    ], w.slowest_callbacks, 'No real driver\'s callbacks in these records.');
  }

  function failures(data) {
    var f = data.failures;
    var injected = f.cycles.filter(function (r) { return (r.injected || []).length; }).length;
    document.getElementById('failures-note').textContent =
      f.total + ' cycles did not pass' + (f.shown < f.total ? '; the newest ' + f.shown + ' are listed' : '') +
      (injected ? '; ' + injected + ' of those listed had a fault injected on purpose (not the kernel\'s fail)' : '') + '.';
    table(document.getElementById('table-failures'), [
      ['run', function (r) { return r.run_id; }],
      ['cycle', function (r) { return timelineLink(r, String(r.cycle)); }, 'num'],
      ['started', function (r) { return r.host_start; }],
      ['mode', function (r) { return r.mode; }],
      ['verdict', function (r) {
        return r.verdict +
          (r.expected_verdict !== 'pass' ? ' (expected ' + r.expected_verdict + ')' : '') +
          ((r.injected || []).length ? ' (fault injected: ' + r.injected.join(', ') + ')' : '');
      }],
      ['phase', function (r) { return r.phase; }],
      ['buckets', function (r) { return r.buckets.join(' '); }, 'text'],
      ['reason', function (r) { return r.reason; }, 'text'],
      ['timeline', function (r) { return timelineLink(r, 'timeline', '\u2013'); }]
    ], f.cycles.slice().reverse(), data.inputs.cycles ? 'Every cycle passed.' : 'No cycles recorded.');
  }

  function runs(data) {
    var ids = Object.keys(data.runs).sort();
    table(document.getElementById('table-runs'), [
      ['run', function (id) { return id; }, 'text'],
      ['cycles', function (id) { return data.runs[id].cycles; }, 'num'],
      ['first start', function (id) { return data.runs[id].first_start; }],
      ['last start', function (id) { return data.runs[id].last_start; }],
      ['builds', function (id) { return data.runs[id].builds.join(' '); }, 'text'],
      ['kernels', function (id) { return (data.runs[id].kernels || []).join(' '); }, 'text'],
      ['setup', function (id) {
        return data.runs[id].manifests.map(function (m) {
          return ['kernel ' + fmt(m.tree_version), 'series ' + fmt(m.series_hash), 'config ' + fmt(m.config_hash),
                  'qemu ' + fmt(m.qemu), 'ovmf ' + fmt(m.ovmf), 'libvirt ' + fmt(m.libvirtd),
                  'host ' + fmt(m.host)].join(', ');
        }).join(' | ') || 'no manifest';
      }, 'text']
    ], ids, 'No runs.');
  }

  function latencyChange(data) {
    var change = data.latency_change || {run: null, baseline: [], rows: []};
    document.getElementById('latency-change-note').textContent = change.run === null ? 'No run.' :
      'Run ' + change.run + (change.baseline.length ? ' against ' + change.baseline.join(', ') : ' (no earlier run of its device set)') +
      ': device callbacks and PM phases whose median got slower by >= 20 ms and >= 20 %; flagged when the one-sided Mann-Whitney U test gives p < 0.01 (lab/latency.py).';
    table(document.getElementById('table-latency-change'), [
      ['callback or phase', function (r) { return [r.driver, r.device, r.callback].filter(Boolean).join(' '); }, 'text'],
      ['median before (ms)', function (r) { return r.before_ms; }, 'num'],
      ['median after (ms)', function (r) { return r.after_ms; }, 'num'],
      ['n', function (r) { return r.n_before + ' vs ' + r.n_after; }, 'num'],
      ['p', function (r) { return r.p; }, 'num'],
      ['flagged', function (r) { return r.flagged ? el('span', 'status-fail', 'yes') : 'no'; }]
    ], change.rows, 'Nothing slower by the floor.');
  }

  function harnessMemory(data) {
    var section = data.harness_memory || {runs: {}};  /* dashboards written before it lack it */
    var rows = [];
    Object.keys(section.runs).sort().forEach(function (id) {
      section.runs[id].forEach(function (p) { rows.push({run: id, p: p}); });
    });
    table(document.getElementById('table-memory'), [
      ['run', function (r) { return r.run; }, 'text'],
      ['lab.run pid', function (r) { return r.p.pid; }, 'num'],
      ['records', function (r) { return r.p.cycles; }, 'num'],
      ['cycles', function (r) { return r.p.first_cycle + '\u2013' + r.p.last_cycle; }],
      ['first (KiB)', function (r) { return r.p.first_kib; }, 'num'],
      ['last (KiB)', function (r) { return r.p.last_kib; }, 'num'],
      ['max (KiB)', function (r) { return r.p.max_kib; }, 'num'],
      ['last \u2212 first (KiB)', function (r) {
        var d = r.p.last_kib - r.p.first_kib;
        return (d > 0 ? '+' : '') + d;
      }, 'num']
    ], rows, 'No record has harness_rss_kib (records written before the lab measured itself).');
  }

  function main() {
    var data;
    try {
      data = JSON.parse(document.getElementById('dashboard-data').textContent);
    } catch (error) {
      pageError('cannot read the embedded dashboard data: ' + error);
      document.body.dataset.charts = 'failed';
      return;
    }
    if (data.schema !== 'pmlab-dashboard/1') pageError('unexpected dashboard schema ' + data.schema);
    var links = document.getElementById('timeline-links');  /* pages rendered before timelines lack it */
    if (links) {
      try { timelineLinks = JSON.parse(links.textContent); } catch (error) { pageError('timeline links: ' + error); }
    }
    var steps = [overview, headline, failures, kernelsSection, success, labErrors, worksAfterResume, bucketSection, trend, timing, hostTime, latency, latencyChange, runs, harnessMemory];
    steps.forEach(function (step) {
      try { step(data); } catch (error) { pageError(step.name + ': ' + (error && error.stack || error)); }
    });
    created = true;
    maybeReady();
  }

  if (typeof Chart === 'undefined') {
    document.addEventListener('DOMContentLoaded', function () {
      pageError('Chart.js did not load (chart.min.js missing next to the page?)');
      document.body.dataset.charts = 'failed';
    });
    return;
  }
  document.addEventListener('DOMContentLoaded', main);
})();
