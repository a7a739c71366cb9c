/* Placeholder compiled into a layer that has no sources yet. */
typedef int dbranch_empty_layer;
