/**
 * Stands in for the whatwg-url package in the agent bundle (Makefile:
 * --alias). node-fetch 2 imports it only for a URL class when Node has none
 * (`Url.URL || whatwgUrl.URL`); Node always has one, and whatwg-url's tr46
 * mapping table cost the agent 3–4 MiB of RSS at every start-up phase.
 */
export { URL, URLSearchParams } from 'node:url';
export default { URL: globalThis.URL, URLSearchParams: globalThis.URLSearchParams };
