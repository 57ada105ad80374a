/*
 * cli_top.c - see cli_top.h.
 *
 * Once a second it asks the broker for its status over a fresh connection
 * (the same checks as `gpushare status`: a broker that stopped, or came
 * back as a new process, is simply asked again) and redraws the screen
 * with plain ANSI escapes: the alternate screen while it runs, the cursor
 * home, each line cleared to its end, the rest of the screen cleared.  The
 * frame is composed in memory and written at once, so the screen never
 * shows half of one.  q or Ctrl-C quits and gives the terminal back as it
 * was (its mode, the cursor, the normal screen), also on SIGTERM and
 * SIGHUP.  Without a terminal, or with --once, it prints plain frames.
 */
#define _GNU_SOURCE
#include "cli_top.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "status_fetch.h"
#include "endpoint.h"
#include "top_render.h"

static volatile sig_atomic_t stop_signal, resized;

static void on_stop(int sig)
{
    stop_signal = sig;
}

static void on_winch(int sig)
{
    (void)sig;
    resized = 1; /* redraw at once, in the new size (read every frame) */
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: gpushare top [--once] [--interval SECONDS]\n"
                 "A live view of the broker, redrawn every second: per GPU its memory, and a\n"
                 "line per session (user, session, state, cell, share of the GPU over the\n"
                 "last interval, memory resident and parked, time spent waiting, notebook).\n"
                 "q or Ctrl-C quits.  --once prints one frame and exits (1 when no broker\n"
                 "answers); without a terminal, plain frames follow one another.\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void terminal_size(int *width, int *height)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
        *width = ws.ws_col;
        *height = ws.ws_row;
    }
}

/* One status, or NULL with problem set.  The endpoint is worked out again
 * each time (a per-user broker may appear later); its note goes into the
 * frame, not onto a screen being redrawn. */
static json_t *fetch(const char *given, char *endpoint, size_t eplen, char *note, size_t notelen,
                     char *problem, size_t problemlen, int timeout_ms)
{
    note[0] = '\0';
    int rc = given ? gs_endpoint_normalise(given, endpoint, eplen, problem, problemlen)
                   : gs_endpoint_for_client(endpoint, eplen, note, notelen, problem, problemlen);
    if (rc != 0)
        return NULL;
    return gs_cli_status_fetch(endpoint, timeout_ms, problem, problemlen);
}

/* Draws one frame.  ansi: home, clear each line's rest and below. */
static void draw(const gs_top_frame_t *frame, int ansi, const char *note)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return;
    if (ansi)
        fputs("\033[H", mem);
    gs_top_render(mem, frame);
    if (note && *note)
        fprintf(mem, "note: %.*s\n", frame->width > 6 ? frame->width - 6 : 200, note);
    fclose(mem);
    if (ansi) {
        /* "\033[K" before each newline: what the last frame left there goes. */
        for (char *line = text, *nl; *line; line = nl + 1) {
            nl = strchr(line, '\n');
            if (!nl) {
                fputs(line, stdout);
                break;
            }
            fwrite(line, 1, (size_t)(nl - line), stdout);
            fputs(nl[1] ? "\033[K\r\n" : "\033[K", stdout);
        }
        fputs("\033[J", stdout);
    } else {
        fputs(text, stdout);
    }
    fflush(stdout);
    free(text);
}

static struct termios saved_tty;
static int tty_saved, screen_taken;

/* TCSANOW, not TCSAFLUSH, here and below: what the user typed after q or
 * Ctrl-C belongs to the shell that gets the terminal back. */
static void restore_terminal(void)
{
    if (screen_taken) {
        fputs("\033[?25h\033[?1049l", stdout); /* cursor back, normal screen */
        fflush(stdout);
        screen_taken = 0;
    }
    if (tty_saved) {
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
        tty_saved = 0;
    }
}

/* Keys one at a time, no echo; signals (Ctrl-C) stay as they are. */
static void take_terminal(int ansi)
{
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_tty) == 0) {
        struct termios raw = saved_tty;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
            tty_saved = 1;
    }
    if (ansi) {
        fputs("\033[?1049h\033[?25l\033[H\033[J", stdout); /* alternate screen, no cursor */
        fflush(stdout);
        screen_taken = 1;
    }
}

/* Waits until deadline for a key; 1 when it asks to quit.  The signals
 * are blocked everywhere else (see gs_cli_top_main) and let in only here,
 * by ppoll(): a Ctrl-C then always interrupts this wait, never lands on
 * one of libzmq's threads while this one goes on reading the keys that
 * were meant for the shell. */
static int wait_keys(double deadline, int keys, const sigset_t *waiting_mask)
{
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0 || stop_signal)
            return stop_signal != 0;
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        struct timespec ts = {.tv_sec = (time_t)left,
                              .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
        int n = ppoll(&p, keys ? 1 : 0, &ts, waiting_mask);
        if (n < 0 && errno == EINTR) {
            if (resized) {
                resized = 0;
                return 0;
            }
            continue; /* a signal: stop_signal says which */
        }
        if (n <= 0)
            continue;
        char c;
        ssize_t r = read(STDIN_FILENO, &c, 1);
        if (r == 0)
            keys = 0; /* end of input: only signals from now on */
        else if (r == 1 && (c == 'q' || c == 'Q'))
            return 1;
        else if (r == 1 && (c == ' ' || c == 'r'))
            return 0; /* redraw now */
    }
}

int gs_cli_top_main(int argc, char **argv, const char *endpoint)
{
    int once = 0;
    double interval = 1.0;
    static const struct option longopts[] = {{"once", no_argument, 0, 'o'},
                                             {"interval", required_argument, 0, 'i'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    optind = 0; /* afresh: gpushare's own options were parsed with other rules */
    opterr = 0; /* the messages are ours, prefixed "gpushare top" */
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'o':
            once = 1;
            break;
        case 'i':
            interval = strtod(optarg, &end);
            if (*end || end == optarg || !(interval >= 0.1 && interval <= 3600)) {
                fprintf(stderr,
                        "gpushare top: --interval \"%s\": a number of seconds from "
                        "0.1 to 3600\n",
                        optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            fprintf(stderr, "gpushare top: \"%s\" needs a value\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            fprintf(stderr, "gpushare top: unknown option \"%s\"\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpushare top: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    int tty_out = isatty(STDOUT_FILENO);
    int ansi = tty_out && !once;
    /* Blocked before libzmq starts its threads, which inherit the mask:
     * only wait_keys() takes these signals. */
    sigset_t handled, waiting_mask;
    sigemptyset(&handled);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGTERM);
    sigaddset(&handled, SIGHUP);
    sigaddset(&handled, SIGWINCH);
    pthread_sigmask(SIG_BLOCK, &handled, &waiting_mask);
    struct sigaction sa = {.sa_handler = on_stop}; /* no SA_RESTART: ppoll() returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    struct sigaction winch = {.sa_handler = on_winch};
    sigemptyset(&winch.sa_mask);
    sigaction(SIGWINCH, &winch, NULL);
    if (!once)
        take_terminal(ansi);

    json_t *prev = NULL;
    double prev_t = 0;
    int rc = 0, keys = tty_saved;
    while (!stop_signal) {
        char ep[256] = "", note[600], problem[600] = "";
        double start = now_s();
        /* A hung broker must not freeze the screen for long. */
        int timeout_ms = interval < 1.0 ? (int)(interval * 900) : 900;
        json_t *st =
            fetch(endpoint, ep, sizeof ep, note, sizeof note, problem, sizeof problem, timeout_ms);
        int width = 0, height = 0;
        if (tty_out)
            terminal_size(&width, &height);
        char clock[16];
        time_t t = time(NULL);
        strftime(clock, sizeof clock, "%H:%M:%S", localtime(&t));
        double when = now_s();
        gs_top_frame_t frame = {.status = st,
                                .prev = st ? prev : NULL,
                                .interval_s = prev ? when - prev_t : interval,
                                .problem = problem,
                                .endpoint = ep,
                                .clock = clock,
                                .width = width,
                                .height = ansi ? height - (note[0] ? 1 : 0) : 0,
                                .interactive = ansi};
        if (!st)
            frame.interval_s = interval;
        if (once && !st) {
            fprintf(stderr, "gpushare top: %s\n", problem);
            rc = 1;
            break;
        }
        draw(&frame, ansi, note);
        json_decref(prev);
        prev = st; /* NULL after a failure: the next share starts afresh */
        prev_t = when;
        if (once)
            break;
        if (!ansi)
            fputs("\n", stdout);
        if (wait_keys(start + interval, keys, &waiting_mask))
            break;
    }
    json_decref(prev);
    restore_terminal();
    pthread_sigmask(SIG_SETMASK, &waiting_mask, NULL);
    return rc;
}
