// firstfault dashboard: small progressive enhancements; every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // filters: a changed select applies at once
  for (const select of document.querySelectorAll("select[data-autosubmit]")) {
    select.addEventListener("change", () => select.form && select.form.requestSubmit());
  }
  // "/" focuses the search box
  const search = document.querySelector("[data-shortcut='/']");
  if (search) {
    document.addEventListener("keydown", (event) => {
      const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
      if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey) {
        event.preventDefault();
        search.focus();
        search.select();
      }
    });
  }
  // empty fields, and fields left at their default, stay out of the URL
  for (const form of document.querySelectorAll("form.filters")) {
    form.addEventListener("submit", () => {
      for (const field of form.querySelectorAll("input, select")) {
        if (!field.value || field.value === field.dataset.default) field.disabled = true;
      }
    });
  }
});
