/* picolibc's libm in double and float, each result printed to its last bit (%.17g,
 * %.9g), then printf's %f, %e, %g and %5.2f (soft float in the chip: every bit must match
 * golden's and qemu's). */
#include <math.h>
#include <stdio.h>

static void d(const char *name, double x) { printf("%-6s %.17g\n", name, x); }
static void f(const char *name, float x) { printf("%-6s %.9g\n", name, (double)x); }

int main(void) {
    double x = 0.7, y = 2.5;
    d("sqrt", sqrt(2.0));
    d("sin", sin(x));
    d("cos", cos(x));
    d("tan", tan(x));
    d("atan2", atan2(x, -y));
    d("exp", exp(y));
    d("log", log(y));
    d("pow", pow(y, x));
    d("floor", floor(-y));
    d("ceil", ceil(-y));
    d("fmod", fmod(10.0, 3.0 * x));
    float a = 0.7f, b = 2.5f;
    f("sqrtf", sqrtf(2.0f));
    f("sinf", sinf(a));
    f("cosf", cosf(a));
    f("tanf", tanf(a));
    f("atan2f", atan2f(a, -b));
    f("expf", expf(b));
    f("logf", logf(b));
    f("powf", powf(b, a));
    f("floorf", floorf(-b));
    f("ceilf", ceilf(-b));
    f("fmodf", fmodf(10.0f, 3.0f * a));
    char line[96];
    snprintf(line, sizeof line, "[%f] [%5.2f] [%e] [%g] [%g]", exp(1.0), 3.14159, 1234.5, 0.0001, 1e20);
    puts(line);
    return 0;
}
