// Placeholder until the page's bundle is built into web/dist/.
document.querySelector('[role="status"]').textContent = 'the web client is not built into this host';
