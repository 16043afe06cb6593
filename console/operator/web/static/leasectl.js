// The web console's own script (no inline script: the page's Content-Security-Policy allows this
// file and textual.js, nothing else). It points the terminal at this page's own websocket, which
// the server accepts only with this page's Origin and the session cookie; the restart button opens
// a new console, or the sign-in page if the session has ended.
document.addEventListener("DOMContentLoaded", function () {
  var terminal = document.getElementById("terminal");
  if (terminal) {
    var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    terminal.dataset.sessionWebsocketUrl = scheme + "//" + window.location.host + "/ws";
  }
  var restart = document.getElementById("restart");
  if (restart) {
    restart.addEventListener("click", function () { window.location.href = "/"; });
  }
});
