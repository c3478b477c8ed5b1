// The kernel link of an nbdurable view: is the kernel behind this widget still there?
// The kernel prepends this file to each view's module (nbdurable/notebook/widgets/assets.py),
// so every view judges its kernel the same way.
//
// link.state is "checking" until the kernel answers the first probe, "live" once it
// has, and "disconnected" when a send fails (the comm is gone for good) or nothing
// answers while the kernel is not busy. link.busy is true while a running cell holds
// the kernel (messages wait their turn). The link sends {type: "ping", nonce} and reads
// the kernel's {type: "pong"} and {type: "ack"} (a click reached it) itself; the view
// calls link.alive() on any other answer. Every message, either way, is tagged by
// `type`: docs/notebook.md, "Widget messages", lists them (kernel side: _messages.py).

const ANSWER_MS = 5000; // a probe or a click unanswered this long: the kernel is gone
const BUSY_RECHECK_MS = 1000; // while the kernel runs a cell, messages wait their turn
const REPROBE_MS = 10000; // after an unanswered probe, ask again now and then

function kernelLink(model, { onState, onLive, onAck }) {
  // onState(state): the state changed; onLive(): what the view says of the link may
  // have changed (busy or not) while the state stayed the same; onAck(approval_id):
  // the kernel got the click on that approval.
  const link = { state: "checking", busy: false };
  let gone = false;
  let timer = null;
  let nonce = 0;

  const set = (state) => {
    link.state = state;
    onState(state);
  };
  const kernelBusy = () => {
    try {
      const kernel = model.widget_manager && model.widget_manager.kernel;
      return !!kernel && kernel.status === "busy";
    } catch (_err) {
      return false;
    }
  };
  const unanswered = () => {
    timer = null;
    if (kernelBusy()) {
      link.busy = true; // a running cell holds the kernel: the message waits its turn
      onLive();
      timer = setTimeout(unanswered, BUSY_RECHECK_MS);
      return;
    }
    if (link.busy) {
      link.busy = false; // the kernel just became free: the message is next in line
      onLive();
      timer = setTimeout(unanswered, ANSWER_MS);
      return;
    }
    set("disconnected");
    timer = setTimeout(link.probe, REPROBE_MS); // a late answer makes the view live again
  };
  link.send = (content) => {
    if (gone) return false;
    try {
      model.send(content);
      return true;
    } catch (_err) {
      gone = true; // the comm was disposed with its kernel
      clearTimeout(timer);
      set("disconnected");
      return false;
    }
  };
  link.expectAnswer = () => {
    clearTimeout(timer);
    timer = setTimeout(unanswered, ANSWER_MS);
  };
  link.probe = () => {
    nonce += 1;
    if (link.send({ type: "ping", nonce })) link.expectAnswer();
  };
  link.alive = () => {
    if (gone) return;
    clearTimeout(timer);
    timer = null;
    link.busy = false;
    if (link.state !== "live") set("live");
    else onLive();
  };

  const onAnswer = (msg) => {
    if (!msg || (msg.type !== "pong" && msg.type !== "ack")) return;
    if (msg.type === "ack") onAck(msg.approval_id);
    link.alive();
  };
  model.on("msg:custom", onAnswer);

  // the widget manager lost (or found) the kernel, or the kernel restarts: ask again
  let kernel = null;
  const onKernelStatus = (_sender, status) => {
    if (status === "restarting" || status === "autorestarting" || status === "dead") link.probe();
  };
  model.on("comm_live_update", link.probe);
  try {
    kernel = model.widget_manager && model.widget_manager.kernel;
    if (kernel && kernel.statusChanged && kernel.statusChanged.connect) {
      kernel.statusChanged.connect(onKernelStatus);
    } else {
      kernel = null;
    }
  } catch (_err) {
    kernel = null;
  }
  link.dispose = () => {
    clearTimeout(timer);
    model.off("comm_live_update", link.probe);
    model.off("msg:custom", onAnswer);
    if (kernel) {
      try {
        kernel.statusChanged.disconnect(onKernelStatus);
      } catch (_err) {
        // the kernel connection is already disposed
      }
    }
  };
  return link;
}
