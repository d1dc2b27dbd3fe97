"""The shared vocabulary, the bottom layer: errors, the read request and its answer (`files`),
paths, the plan as data (`changes`), the profile schema's markers, printable text and sh quoting.
Plain data and pure functions that every layer above speaks; nothing here imports another
package of tune."""
