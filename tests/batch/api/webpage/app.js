console.log("stand-in");
