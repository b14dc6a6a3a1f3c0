// reactstep ui: the page. It posts a task to api/run and reads the run's events back, one JSON
// object a line, as the loop's Watcher sends them: waiting, thought_piece, repair, warning, thought,
// context, action, approval_request, approval, observation, step, plan, evaluation, tools_changed, end.
// Plain script, no framework, no other site: every path is relative, so an editor's webview
// can embed the page.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const log = $('log');
  const message = $('message');
  const taskInput = $('task');
  const runButton = $('run');
  const stopButton = $('stop');

  /** The run on the page: its cards by iteration, the plan, the tools run so far. */
  let run = null;
  let running = false;

  /** Characters that turn text around or hide it (bidirectional overrides and isolates,
   * zero-width characters, Unicode's line and paragraph separators, tag characters) and control
   * characters but the line break and the tab: what the terminal driver escapes too. */
  const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]|\udb40[\udc00-\udc7f]/g;

  /** Text from elsewhere (the model, a tool, a server) as the page shows it: each hidden
   * character written as an escape (`\u{202e}`), so what is shown, above all on an approval,
   * reads as what runs. */
  function shown(text) {
    return String(text).replace(HIDDEN, (c) => '\\u{' + c.codePointAt(0).toString(16) + '}');
  }

  /** A JSON text in which every hidden character is a JSON escape: it reads back as the same
   * value, and shows what it holds. */
  function shownJson(value, indent) {
    return JSON.stringify(value, null, indent).replace(HIDDEN, (c) =>
      c.length === 2
        ? '\\u' + c.charCodeAt(0).toString(16) + '\\u' + c.charCodeAt(1).toString(16)
        : '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = shown(text);
    return node;
  }

  function number(n) {
    return Number(n || 0).toLocaleString('en-US');
  }

  function seconds(s) {
    return (s < 10 ? Number(s).toFixed(1) : Math.round(s)) + ' s';
  }

  function showMessage(text, kind) {
    message.textContent = shown(text);
    message.className = 'message ' + (kind || 'error');
    message.hidden = false;
  }

  function clearMessage() {
    message.hidden = true;
    message.textContent = '';
  }

  function banner(text, kind) {
    const node = $('banner');
    node.textContent = shown(text);
    node.className = 'banner ' + kind;
    node.hidden = false;
  }

  // Whatever goes wrong in the page is said, never a blank page.
  window.addEventListener('error', (e) => showMessage('The page met an error: ' + e.message));
  window.addEventListener('unhandledrejection', (e) => {
    const why = e.reason && e.reason.message ? e.reason.message : String(e.reason);
    showMessage('The page met an error: ' + why);
  });

  function follow() {
    log.scrollTop = log.scrollHeight;
  }

  /** The error a refused request carries (`{"error": …}`), or its status. */
  async function errorOf(response) {
    const text = await response.text().catch(() => '');
    try {
      const body = JSON.parse(text);
      if (body && body.error) return body.error;
    } catch (_) {
      // not JSON: the text itself, or the status
    }
    return text.trim() || 'reactstep ui answered ' + response.status + ' ' + response.statusText;
  }

  // The page's token, from the address reactstep ui printed: every request of the API
  // carries it, so no other program on this machine can run tasks or approve calls.
  const token = new URLSearchParams(location.search).get('token') || '';

  function api(path, init) {
    const options = init || {};
    options.headers = Object.assign({ 'X-Reactstep-Token': token }, options.headers || {});
    return fetch(path, options);
  }

  async function post(path, body) {
    return api(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
  }

  // --- what the command runs with -------------------------------------------------------

  async function loadInfo() {
    try {
      const response = await api('api/info');
      if (!response.ok) throw new Error(await errorOf(response));
      const info = await response.json();
      const parts = [info.model];
      if (info.offline) parts.push('offline (scripted model)');
      parts.push(info.workspace);
      if (info.approve !== 'none') parts.push('approval: ' + info.approve);
      if (info.plan) parts.push(info.approve_plan ? 'plan (approved first)' : 'plan');
      if (info.reflect) parts.push('reflect');
      $('about').textContent = parts.join(' · ');
      if (info.missing_key) {
        banner('The model\'s key is missing: ' + info.missing_key + ' is not set, so a run of ' +
          info.model + ' will fail. Set it and start reactstep ui again, or run offline with ' +
          '--mock-responses.', 'warning');
      }
    } catch (e) {
      $('about').textContent = '';
      banner('The page cannot reach reactstep ui: ' + e.message, 'error');
    }
  }

  // --- a run ---------------------------------------------------------------------------

  function setRunning(on) {
    running = on;
    runButton.disabled = on;
    stopButton.hidden = !on;
  }

  function newRun(task) {
    const welcome = $('welcome');
    if (welcome) welcome.remove();
    const root = el('div', 'run');
    root.append(el('div', 'task', task));
    log.append(root);
    follow();
    $('evaluation').replaceChildren(el('p', 'empty', 'No evaluation yet.'));
    $('plan').replaceChildren(el('p', 'empty', 'No plan for this run.'));
    return { root, cards: new Map(), toolsRun: [], plan: null, ended: false, success: false };
  }

  async function start() {
    clearMessage();
    const task = taskInput.value.trim();
    if (!task) {
      showMessage('Type a task first: the task is empty.');
      taskInput.focus();
      return;
    }
    if (running) {
      showMessage('A run is under way: wait for its end, or stop it.');
      return;
    }
    setRunning(true);
    let started = false;
    try {
      const response = await post('api/run', { task, session: $('session').value.trim() });
      if (!response.ok) {
        showMessage(await errorOf(response));
        return;
      }
      taskInput.value = '';
      run = newRun(task);
      started = true;
      await readLines(response, handle);
      if (!run.ended) broke('the run\'s stream ended before the run did');
    } catch (e) {
      if (started) broke('the run\'s stream broke off: ' + e.message);
      else showMessage('reactstep ui did not answer: ' + e.message);
    } finally {
      setRunning(false);
    }
  }

  function broke(why) {
    showMessage('The run stopped: ' + why + '.');
    run.root.append(el('div', 'note error', why));
  }

  async function readLines(response, onEvent) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let newline;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.trim()) onEvent(JSON.parse(line));
      }
    }
  }

  function handle(event) {
    const on = {
      waiting: waiting,
      thought_piece: thoughtPiece,
      repair: repair,
      thought: thought,
      context: context,
      action: action,
      approval_request: approvalRequest,
      plan_approval_request: planApprovalRequest,
      approval: approval,
      observation: observation,
      step: step,
      plan: plan,
      evaluation: evaluation,
      // What the service says the step did that the watcher should know (the loop guard's).
      warning: (e) => card(e.iteration).root.append(el('div', 'note warning', e.text)),
      tools_changed: (e) => run.root.append(el('div', 'note', e.text)),
      session: (e) => run.root.append(el('div', 'note', e.earlier_turns
        ? 'continuing the session ' + e.name + ' (' + e.earlier_turns + ' earlier turns)'
        : 'a new session: ' + e.name)),
      end: end,
      heartbeat: () => {},
    }[event.type];
    if (on) on(event);
    follow();
  }

  // --- a step's card ---------------------------------------------------------------------

  function card(iteration) {
    let c = run.cards.get(iteration);
    if (c) return c;
    const root = el('article', 'card');
    root.dataset.iteration = iteration;
    root.dataset.pieces = '0';
    const header = el('header');
    const status = el('span', 'status');
    const meta = el('span', 'meta');
    header.append(el('span', 'step', 'Step ' + iteration), status, meta);
    const thoughtRow = row('thought', 'Thought');
    const calls = el('div', 'calls');
    const ctx = el('div', 'context');
    root.append(header, thoughtRow.row, calls, ctx);
    run.root.append(root);
    c = { root, status, meta, thought: thoughtRow, calls, ctx, pieces: 0, tokens: null, used: 0, seconds: null, last: null };
    run.cards.set(iteration, c);
    return c;
  }

  function row(className, label) {
    const r = el('div', 'row ' + className);
    const text = el('span', 'text');
    r.append(el('span', 'label', label), text);
    return { row: r, text };
  }

  function waiting(e) {
    const c = card(e.iteration);
    c.status.textContent = 'waiting for the model…';
    // A step sent again (the service said a retry can help) streams its thought anew.
    c.thought.text.textContent = '';
    c.thought.row.classList.remove('forming');
  }

  // The service asks the model again (a repair round): the next attempt's thought streams anew.
  function repair(e) {
    const c = card(e.iteration);
    c.status.textContent = shown('asked again: ' + e.reason);
    c.thought.text.textContent = '';
    c.thought.row.classList.remove('forming');
  }

  function thoughtPiece(e) {
    const c = card(e.iteration);
    c.status.textContent = 'thinking…';
    c.thought.row.classList.add('forming');
    c.thought.text.textContent += shown(e.text);
    c.pieces += 1;
    c.root.dataset.pieces = String(c.pieces);
  }

  function thought(e) {
    const c = card(e.iteration);
    c.thought.text.textContent = shown(e.text);
    c.thought.row.classList.remove('forming');
    c.status.textContent = '';
  }

  function action(e) {
    const c = card(e.iteration);
    c.thought.row.classList.remove('forming');
    c.status.textContent = shown('running ' + e.tool + '…');
    const call = el('div', 'call');
    const a = el('div', 'row action');
    const args = shownJson(e.args);
    a.append(el('span', 'label', 'Action'), el('span', 'tool', e.tool), el('span', 'args', args === '{}' ? '' : args));
    call.append(a);
    c.calls.append(call);
    c.last = call;
    run.toolsRun.push(e.tool);
    tickPlan();
  }

  /** The observation's first lines, with a button that opens it whole. */
  function observation(e) {
    const c = card(e.iteration);
    c.status.textContent = '';
    const r = el('div', 'row observation');
    if (/^The user denied this call/.test(e.text)) r.classList.add('failed');
    const body = el('div', 'body');
    const pre = el('pre');
    const short = shortened(e.text);
    pre.textContent = shown(short);
    body.append(pre);
    if (short !== e.text) {
      const more = el('button', 'more', 'show all (' + number(e.bytes) + ' bytes)');
      more.type = 'button';
      let open = false;
      more.addEventListener('click', () => {
        open = !open;
        pre.textContent = shown(open ? e.text : short);
        more.textContent = open ? 'show less' : 'show all (' + number(e.bytes) + ' bytes)';
      });
      body.append(more);
    }
    r.append(el('span', 'label', 'Observation'), body);
    (c.last || c.calls).append(r);
  }

  function shortened(text) {
    const lines = text.split('\n');
    let short = lines.slice(0, 3).join('\n');
    if (short.length > 240) short = short.slice(0, 240);
    return short.length < text.length ? short + ' …' : text;
  }

  function step(e) {
    const c = card(e.iteration);
    if (e.tokens) c.tokens = { prompt: e.tokens.prompt_tokens || 0, completion: e.tokens.completion_tokens || 0 };
    c.seconds = e.seconds;
    showMeta(c);
  }

  /** The step's tokens as the model counted them (prompt + completion); a scripted model counts
   * none, and then the prompt's tokens as the service counted them are shown. */
  function showMeta(c) {
    const parts = [];
    if (c.tokens && (c.tokens.prompt || c.tokens.completion)) {
      parts.push(number(c.tokens.prompt) + ' + ' + number(c.tokens.completion) + ' tokens');
    } else if (c.used) {
      parts.push(number(c.used) + ' prompt tokens');
    }
    if (c.seconds !== null) parts.push(seconds(c.seconds));
    c.meta.textContent = parts.join(' · ');
  }

  // --- approval ------------------------------------------------------------------------

  function approvalRequest(e) {
    const c = card(e.iteration);
    c.status.textContent = 'waiting for your approval…';
    const box = el('div', 'approval-request');
    box.dataset.id = e.id;
    const warning = e.destructive ? ' (it may delete or overwrite)' : '';
    box.append(el('div', '', 'The model wants to run ' + e.tool + warning + '. Run it?'));
    const buttons = el('div', 'buttons');
    const approve = el('button', 'approve', 'Approve');
    const deny = el('button', 'deny', 'Deny');
    const edit = el('button', 'edit', 'Edit…');
    const reason = el('input');
    reason.placeholder = 'reason, if you deny (the model reads it)';
    approve.type = deny.type = edit.type = 'button';
    buttons.append(approve, deny, edit, reason);
    box.append(buttons);
    const editor = argumentsEditor(e.args);
    const all = [approve, deny, edit, editor.run];
    const answer = async (decision, extra) => {
      for (const b of all) b.disabled = true;
      try {
        const body = Object.assign({ id: e.id, decision, reason: reason.value }, extra);
        const response = await post('api/approval', body);
        if (!response.ok) throw new Error(await errorOf(response));
      } catch (err) {
        showMessage('The decision did not reach reactstep ui: ' + err.message);
        for (const b of all) b.disabled = false;
      }
    };
    approve.addEventListener('click', () => answer('approve'));
    deny.addEventListener('click', () => answer('deny'));
    edit.addEventListener('click', () => {
      editor.root.hidden = false;
      editor.text.focus();
    });
    editor.run.addEventListener('click', () => {
      const args = editor.read();
      if (args !== undefined) answer('edit', { arguments: args });
    });
    box.append(editor.root);
    (c.last || c.calls).append(box);
  }

  /** The call's arguments as JSON to edit (hidden until Edit is pressed); `read` gives the edited
   * object, or says on the page why the text is not one. */
  function argumentsEditor(args) {
    const root = el('div', 'edit-arguments');
    root.hidden = true;
    const text = el('textarea');
    text.value = shownJson(args === undefined ? {} : args, 2);
    text.rows = Math.min(12, text.value.split('\n').length + 1);
    text.spellcheck = false;
    const run = el('button', 'run-edited', 'Run with these arguments');
    run.type = 'button';
    const problem = el('div', 'edit-problem');
    root.append(text, run, problem);
    const read = () => {
      let value;
      try {
        value = JSON.parse(text.value);
      } catch (err) {
        problem.textContent = 'That is not JSON: ' + err.message;
        return undefined;
      }
      if (value === null || typeof value !== 'object' || Array.isArray(value)) {
        problem.textContent = 'The arguments must be a JSON object ({ … }).';
        return undefined;
      }
      problem.textContent = '';
      return value;
    };
    return { root, text, run, read };
  }

  /** With --approve-plan: the plan (shown above) runs once the person says so. */
  function planApprovalRequest(e) {
    const box = el('div', 'approval-request plan-approval');
    box.dataset.id = e.id;
    box.append(el('div', '', 'Run this plan?'));
    const buttons = el('div', 'buttons');
    const approve = el('button', 'approve', 'Run the plan');
    const reject = el('button', 'deny', 'Reject');
    approve.type = reject.type = 'button';
    buttons.append(approve, reject);
    box.append(buttons);
    const answer = async (decision) => {
      approve.disabled = reject.disabled = true;
      try {
        const response = await post('api/approval', { id: e.id, decision });
        if (!response.ok) throw new Error(await errorOf(response));
        box.classList.add('answered');
        box.replaceChildren(el('span', 'decision ' + (decision === 'approve' ? 'approved' : 'denied'),
          decision === 'approve' ? 'plan approved' : 'plan rejected'));
      } catch (err) {
        showMessage('The decision did not reach reactstep ui: ' + err.message);
        approve.disabled = reject.disabled = false;
      }
    };
    approve.addEventListener('click', () => answer('approve'));
    reject.addEventListener('click', () => answer('deny'));
    $('plan').append(box);
  }

  function approval(e) {
    const c = card(e.iteration);
    const box = c.root.querySelector('.approval-request:not(.answered)');
    const said = e.decision === 'denied' ? 'denied: ' + (e.reason || '')
      : e.decision === 'edited' ? 'run with the arguments ' + shownJson(e.arguments)
      : e.decision;
    const decision = el('span', 'decision ' + e.decision, e.tool + ' ' + said);
    if (box) {
      box.classList.add('answered');
      box.replaceChildren(decision);
    } else {
      (c.last || c.calls).append(decision);
    }
    c.status.textContent = '';
  }

  // --- the context budget ------------------------------------------------------------------

  /** A bar of the step's budget: what was included, cut, the rest of the prompt, and free;
   * the items dropped beside it (they cost nothing, so they have no width). */
  function context(e) {
    const c = card(e.iteration);
    const report = e.report || {};
    const budget = Math.max(report.budget || 0, report.used || 0, 1);
    const sums = { included: 0, truncated: 0 };
    const count = { included: 0, truncated: 0, dropped: 0, unresolved: 0 };
    const names = { included: [], truncated: [], dropped: [] };
    for (const item of report.items || []) {
      const fate = item.fate in count ? item.fate : 'unresolved';
      count[fate] += 1;
      if (fate in sums) sums[fate] += item.tokens || 0;
      if (fate in names) names[fate].push(item.id + (item.reason ? ' (' + item.reason + ')' : ''));
    }
    const prompt = Math.max(0, (report.used || 0) - sums.included - sums.truncated);
    const bar = el('div', 'ctx-bar');
    bar.title = number(report.used) + ' of ' + number(report.budget) + ' tokens';
    const parts = [
      ['included', sums.included, 'included whole: ' + names.included.join(', ')],
      ['truncated', sums.truncated, 'cut to fit: ' + names.truncated.join(', ')],
      ['instructions', prompt, 'of the instructions, tools and task'],
      ['free', Math.max(0, budget - (report.used || 0)), 'left free'],
    ];
    for (const [kind, tokens, what] of parts) {
      if (!tokens) continue;
      const seg = el('span', 'seg ' + kind);
      seg.style.width = (100 * tokens / budget) + '%';
      if (kind !== 'free') seg.style.minWidth = '2px';
      seg.title = shown(number(tokens) + ' tokens ' + what);
      bar.append(seg);
    }
    const line = el('div', 'ctx-line');
    line.append(el('span', 'label', 'Context'), bar);
    if (count.dropped) {
      const chip = el('span', 'dropped-chip', '✕ ' + count.dropped + ' dropped');
      chip.title = shown(names.dropped.join(', '));
      line.append(chip);
    }
    const legend = el('div', 'ctx-legend');
    const key = (kind, text) => legend.append(el('span', 'key ' + kind), document.createTextNode(text));
    key('included', count.included + ' included');
    key('truncated', count.truncated + ' cut');
    key('dropped', count.dropped + ' dropped');
    key('instructions', 'instructions');
    legend.append(document.createTextNode(' · ' + number(report.used) + ' of ' + number(report.budget) +
      ' tokens (' + Math.round(100 * (report.used || 0) / budget) + '%)'));
    c.ctx.replaceChildren(line, legend);
    c.used = report.used || 0;
    showMeta(c);
  }

  // --- plan and evaluation ---------------------------------------------------------------

  function plan(e) {
    run.plan = e.plan || {};
    const box = $('plan');
    const head = el('div', 'plan-head');
    const complexity = run.plan.complexity || 'plan';
    head.append(el('span', 'badge ' + complexity, complexity));
    if (run.plan.estimated_iterations) head.append(el('span', '', '≈ ' + run.plan.estimated_iterations + ' steps'));
    const list = el('ol', 'checklist');
    for (const s of run.plan.steps || []) {
      const li = el('li');
      const what = el('span', 'what', s.description || '');
      if (s.tool_name) what.append(' ', el('code', '', s.tool_name));
      li.append(el('span', 'box'), what);
      list.append(li);
    }
    box.replaceChildren(head, list);
    tickPlan();
  }

  /** Step k is done when a call to its tool ran, in order (the steps before it with it), and
   * every step when the answer came. */
  function tickPlan() {
    if (!run || !run.plan) return;
    const steps = run.plan.steps || [];
    const done = new Set();
    let next = 0;
    for (const tool of run.toolsRun) {
      for (let k = next; k < steps.length; k++) {
        if (steps[k].tool_name === tool) {
          for (let j = next; j <= k; j++) done.add(j);
          next = k + 1;
          break;
        }
      }
    }
    if (run.ended && run.success) steps.forEach((_, i) => done.add(i));
    $('plan').querySelectorAll('.checklist li').forEach((li, i) => li.classList.toggle('done', done.has(i)));
  }

  function evaluation(e) {
    const ev = e.evaluation || {};
    const box = $('evaluation');
    const parts = [];
    for (const [name, key] of [['Completeness', 'completeness_score'], ['Quality', 'quality_score']]) {
      const score = Number(ev[key] || 0);
      const s = el('div', 'score');
      const label = el('div', 'name');
      label.append(el('span', '', name), el('span', '', score + '/10'));
      const meter = el('div', 'meter ' + (score < 7 ? 'low' : score < 8 ? 'mid' : 'high'));
      const fill = el('span');
      fill.style.width = (10 * Math.max(0, Math.min(10, score))) + '%';
      meter.append(fill);
      s.append(label, meter);
      parts.push(s);
    }
    parts.push(el('div', 'verdict ' + (ev.needs_retry ? 'retry' : 'done'),
      ev.needs_retry ? 'needs another try' : 'accepted'));
    for (const [title, key] of [['Missing', 'missing_info'], ['Suggestions', 'suggestions']]) {
      const items = ev[key] || [];
      if (!items.length) continue;
      const list = el('ul', 'items');
      for (const item of items) list.append(el('li', '', item));
      parts.push(el('h3', '', title), list);
    }
    box.replaceChildren(...parts);
    // The step whose answer was judged says so too.
    const cards = [...run.cards.values()];
    const last = cards[cards.length - 1];
    if (last) {
      const r = row('evaluated', 'Evaluation');
      r.text.textContent = shown('completeness ' + (ev.completeness_score || 0) + '/10 · quality ' +
        (ev.quality_score || 0) + '/10 · ' + (ev.needs_retry ? 'another try' +
        ((ev.missing_info || []).length ? ': missing ' + ev.missing_info.join('; ') : '') : 'accepted'));
      r.row.classList.add(ev.needs_retry ? 'retry' : 'done');
      last.calls.append(r.row);
      // An answer sent back is not the run's answer, so it is shown here, where it was judged.
      if (ev.needs_retry && e.answer) {
        const sent = row('rejected', 'Sent back');
        sent.text.textContent = shown(e.answer);
        last.calls.append(sent.row);
      }
    }
  }

  // --- the end ---------------------------------------------------------------------------

  function end(e) {
    run.ended = true;
    run.success = !!e.success;
    // The final answer's step has no call, so no step event: its tokens are what the run's
    // totals hold beyond the cards', its time the last step's.
    const cards = [...run.cards.values()];
    const last = cards[cards.length - 1];
    if (last && last.seconds === null) {
      const counted = cards.reduce((sum, c) => {
        sum.prompt += c.tokens ? c.tokens.prompt : 0;
        sum.completion += c.tokens ? c.tokens.completion : 0;
        return sum;
      }, { prompt: 0, completion: 0 });
      const tokens = e.tokens || {};
      last.tokens = {
        prompt: Math.max(0, (tokens.prompt_tokens || 0) - counted.prompt),
        completion: Math.max(0, (tokens.completion_tokens || 0) - counted.completion),
      };
      last.seconds = e.last_step_seconds;
      showMeta(last);
    }
    for (const c of cards) {
      c.status.textContent = '';
      c.thought.row.classList.remove('forming');
    }
    // A question the run no longer waits for is closed.
    for (const box of document.querySelectorAll('.approval-request:not(.answered)')) {
      box.classList.add('answered');
      box.replaceChildren(el('span', 'decision', 'not decided: the run ended'));
    }
    const box = el('div', e.success ? 'answer' : 'answer failed');
    const title = e.success ? 'Answer' : 'The run ended without an answer (' + String(e.termination).replace(/_/g, ' ') + ')';
    box.append(el('span', 'title', title), document.createTextNode(shown(e.answer || '')));
    if (e.hint) box.append(el('span', 'hint', e.hint));
    run.root.append(box);
    const total = (e.tokens && (e.tokens.prompt_tokens + e.tokens.completion_tokens)) || 0;
    let summary = e.iterations + (e.iterations === 1 ? ' step' : ' steps');
    if (total) summary += ' · ' + number(total) + ' tokens';
    summary += ' · ' + seconds(e.seconds || 0);
    if (e.confidence !== null && e.confidence !== undefined) summary += ' · confidence ' + e.confidence;
    if (e.saved) summary += ' · saved in the session ' + e.saved.session;
    run.root.append(el('div', 'summary', summary));
    if (!e.success) showMessage(e.hint ? e.answer + ' ' + e.hint : e.answer);
    if (e.not_saved) {
      run.root.append(el('div', 'note error', e.not_saved));
      showMessage(e.not_saved);
    }
    tickPlan();
    loadSessions();
  }

  // --- sessions ------------------------------------------------------------------------------

  function when(time) {
    const date = new Date(time);
    return isNaN(date) ? '' : date.toLocaleString('en-GB', { dateStyle: 'short', timeStyle: 'short' });
  }

  /** The sessions the runs are saved in, the most recent first; the chosen one's runs. */
  async function loadSessions() {
    const box = $('sessions');
    try {
      const response = await api('api/sessions');
      if (!response.ok) throw new Error(await errorOf(response));
      const body = await response.json();
      $('sessions-panel').title = 'kept in ' + body.store;
      if (!body.sessions.length) {
        box.replaceChildren(el('p', 'empty', 'No session saved yet.'));
        return;
      }
      const list = el('ul', 'sessions');
      const chosen = $('session').value.trim();
      for (const s of body.sessions) {
        const li = el('li');
        li.dataset.name = s.name;
        li.classList.toggle('current', s.name === chosen);
        li.title = 'continue this session';
        li.append(el('span', 'name', s.name),
          el('span', 'when', s.run_count + (s.run_count === 1 ? ' run · ' : ' runs · ') + when(s.last_active)));
        li.addEventListener('click', () => chooseSession(s.name));
        list.append(li);
      }
      box.replaceChildren(list);
      if (body.sessions.some((s) => s.name === chosen)) showSessionRuns(chosen);
    } catch (e) {
      box.replaceChildren(el('p', 'empty', 'The sessions cannot be read: ' + e.message));
    }
  }

  function chooseSession(name) {
    $('session').value = name;
    for (const li of document.querySelectorAll('#sessions li')) {
      li.classList.toggle('current', li.dataset.name === name);
    }
    showSessionRuns(name);
  }

  async function showSessionRuns(name) {
    const box = $('session-runs');
    try {
      const response = await api('api/sessions/' + encodeURIComponent(name));
      if (!response.ok) throw new Error(await errorOf(response));
      const session = await response.json();
      const list = el('ol', 'session-runs');
      for (const r of session.runs) {
        const li = el('li');
        li.append(el('div', 'question', r.question),
          el('div', 'said ' + (r.termination === 'success' ? 'ok' : 'failed'), r.answer));
        list.append(li);
      }
      box.replaceChildren(el('h3', '', name), list);
    } catch (e) {
      box.replaceChildren(el('p', 'empty', 'The session cannot be read: ' + e.message));
    }
  }

  // --- start ---------------------------------------------------------------------------------

  $('prompt').addEventListener('submit', (e) => {
    e.preventDefault();
    start();
  });
  stopButton.addEventListener('click', async () => {
    try {
      await post('api/stop', {});
    } catch (e) {
      showMessage('The stop did not reach reactstep ui: ' + e.message);
    }
  });
  // A new session for this page until another is named or chosen.
  const now = new Date();
  const pad = (n) => String(n).padStart(2, '0');
  $('session').value = 'ui ' + now.getFullYear() + '-' + pad(now.getMonth() + 1) + '-' + pad(now.getDate()) +
    ' ' + pad(now.getHours()) + ':' + pad(now.getMinutes()) + ':' + pad(now.getSeconds());
  loadInfo();
  loadSessions();
  taskInput.focus();
})();
