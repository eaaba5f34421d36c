// Chooses the document the page shows (?api=tools|admin|opensandbox) and
// marks its link. A separate file, not an inline script: the page's
// Content-Security-Policy allows scripts from 'self' only.
(function () {
  "use strict";
  var apis = { tools: "Tools API", admin: "Admin API", opensandbox: "OpenSandbox API" };
  var api = new URLSearchParams(window.location.search).get("api");
  if (!Object.prototype.hasOwnProperty.call(apis, api)) {
    api = "tools";
  }
  var url = "/openapi/" + api + ".json";
  document.title = apis[api] + " - sandboxkit";
  document.getElementById("json").setAttribute("href", url);
  var links = document.querySelectorAll("#apis a[data-api]");
  for (var i = 0; i < links.length; i++) {
    if (links[i].getAttribute("data-api") === api) {
      links[i].setAttribute("aria-current", "page");
    }
  }
  document.getElementById("doc").setAttribute("spec-url", url);
})();
