/*
 * state_file.c - see state_file.h.
 */
#include "state_file.h"

#include <stdio.h>

static const char header[] =
    "# gpushare-broker's state file: settings saved by `gpushare set --persist`.\n"
    "# Read at start and on SIGHUP after the configuration file (these win over\n"
    "# it; command-line flags win over both).  Delete a line (then reload) to go\n"
    "# back to the configuration file's value.\n";

int gs_state_file_load(const char *path, gs_config_t *out, char *err, size_t errlen)
{
    return gs_config_load(path, 1, out, err, errlen);
}

int gs_state_file_save(const char *path, const setting_t *settings, size_t n, char *err,
                       size_t errlen)
{
    gs_config_t cfg;
    if (gs_config_load(path, 1, &cfg, err, errlen) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char text[sizeof cfg.entries->value], why[200];
        if (gs_config_value_text(settings[i].value, text, sizeof text, why, sizeof why) != 0 ||
            gs_config_put(&cfg, settings[i].key, text, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s: %s", settings[i].key, why);
            rc = -1;
        }
    }
    if (rc == 0)
        rc = gs_config_write(path, &cfg, header, err, errlen);
    gs_config_free(&cfg);
    return rc;
}
